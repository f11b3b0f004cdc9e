"""Every logged metric goes to ``run_dir/metrics.jsonl`` and, optionally, TensorBoard."""

from __future__ import annotations

import json
import math
import time
from pathlib import Path
from typing import Any


class MetricsLog:
    """Append-only JSONL log (one object per line) plus TensorBoard scalars; rank 0 only."""

    TB_KEYS = ("loss", "nll_loss", "ppl", "lr", "grad_norm", "tokens_per_s", "bleu", "chrf")

    def __init__(self, run_dir: Path, enabled: bool = True, tensorboard: bool = True) -> None:
        self.enabled = enabled
        self.path = run_dir / "metrics.jsonl"
        self._tb = None
        if enabled:
            run_dir.mkdir(parents=True, exist_ok=True)
            if tensorboard:
                from torch.utils.tensorboard import SummaryWriter

                self._tb = SummaryWriter(log_dir=str(run_dir / "tb"))

    def log(self, split: str, step: int, **values: Any) -> None:
        if not self.enabled:
            return
        row = {"split": split, "step": step, "time": round(time.time(), 3), **values}
        with self.path.open("a", encoding="utf-8") as f:
            f.write(json.dumps(row) + "\n")
        if self._tb is not None:
            for key in self.TB_KEYS:
                value = values.get(key)
                if isinstance(value, int | float) and math.isfinite(value):
                    self._tb.add_scalar(f"{split}/{key}", value, step)

    def close(self) -> None:
        if self._tb is not None:
            self._tb.flush()
            self._tb.close()
            self._tb = None
