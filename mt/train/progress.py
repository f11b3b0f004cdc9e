"""A tqdm progress bar over updates showing loss, lr, tokens/s and the ETA of whichever limit binds first."""

from __future__ import annotations

import sys

from tqdm.auto import tqdm


def projected_updates(step: int, spent: float, max_updates: int) -> int:
    """The updates a run will have made when its budget is spent, at its pace so far: ``step`` updates
    have spent the fraction ``spent`` (``mt.train.schedule.budget_progress``: of ``max_updates`` or of the
    minutes, whichever binds first), so ``step / spent``, at most ``max_updates`` and at least ``step``."""
    if spent <= 0.0:
        return max_updates
    return max(step, min(max_updates, round(step / spent)))


class Progress:
    """Updates done out of the updates the budget holds: ``max_updates``, or under a time budget the
    updates that will fit in it at the pace so far (so the ETA is the budget's, not 100,000 updates')."""

    def __init__(self, total: int, initial: int = 0, enabled: bool = True) -> None:
        self._bar = None
        self.max_updates = total
        if enabled:
            self._bar = tqdm(
                total=total, initial=initial, desc="train", unit="upd", dynamic_ncols=True,
                mininterval=1.0 if sys.stderr.isatty() else 30.0, file=sys.stderr,
            )

    def update(self, step: int, loss: float, lr: float, tok_s: float, spent: float = 0.0) -> None:
        """After update ``step``; ``spent``: the fraction of the budget spent (0: ``max_updates`` is the total)."""
        if self._bar is None:
            return
        self._bar.total = projected_updates(step, spent, self.max_updates)
        self._bar.n = step
        self._bar.set_postfix(loss=f"{loss:.3f}", lr=f"{lr:.2e}", tok_s=f"{tok_s:,.0f}", refresh=False)
        self._bar.refresh() if self._bar.n == self._bar.total else self._bar.update(0)

    def close(self) -> None:
        if self._bar is not None:
            self._bar.close()
