"""Every logged metric goes to ``run_dir/metrics.jsonl`` and, optionally, TensorBoard; training
metrics are summed over a window of updates between log lines."""

from __future__ import annotations

import json
import math
import time
from pathlib import Path
from typing import Any

from mt.train.step import StepResult


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


class MetricWindow:
    """Sums over the updates since the last log line; ``flush`` gives their means and resets."""

    def __init__(self) -> None:
        self.reset()

    def reset(self) -> None:
        self.loss = self.nll = self.tokens = self.seconds = self.norm = 0.0
        self.updates = 0

    def add(self, r: StepResult, seconds: float) -> None:
        self.loss += r.loss_sum
        self.nll += r.nll_sum
        self.tokens += r.ntokens
        self.seconds += seconds
        self.norm += r.grad_norm
        self.updates += 1

    def tokens_per_s(self) -> float:
        return self.tokens / self.seconds if self.seconds > 0 else 0.0

    def flush(self) -> dict[str, float]:
        tokens = max(self.tokens, 1.0)
        nll = self.nll / tokens / math.log(2)  # bits, as fairseq reports
        out = {
            "loss": self.loss / tokens / math.log(2),
            "nll_loss": nll,
            "ppl": 2**nll,
            "grad_norm": self.norm / max(self.updates, 1),
            "tokens_per_s": self.tokens_per_s(),
            "updates_per_s": self.updates / self.seconds if self.seconds > 0 else 0.0,
            "ntokens": int(self.tokens),
        }
        self.reset()
        return out
