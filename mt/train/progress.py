"""A tqdm progress bar over updates showing loss, lr, tokens/s and the ETA."""

from __future__ import annotations

import sys

from tqdm.auto import tqdm


class Progress:
    def __init__(self, total: int, initial: int = 0, enabled: bool = True) -> None:
        self._bar = None
        if enabled:
            self._bar = tqdm(
                total=total, initial=initial, desc="train", unit="upd", dynamic_ncols=True,
                mininterval=1.0 if sys.stderr.isatty() else 30.0, file=sys.stderr,
            )

    def update(self, step: int, loss: float, lr: float, tok_s: float) -> None:
        if self._bar is None:
            return
        self._bar.n = step
        self._bar.set_postfix(loss=f"{loss:.3f}", lr=f"{lr:.2e}", tok_s=f"{tok_s:,.0f}", refresh=False)
        self._bar.refresh() if self._bar.n == self._bar.total else self._bar.update(0)

    def close(self) -> None:
        if self._bar is not None:
            self._bar.close()
