"""Learning-rate schedules as pure functions of the update number (1-based)."""

from __future__ import annotations

import math

from mt.config import OptimConfig


def noam_lr(step: int, d_model: int, warmup: int, scale: float = 1.0) -> float:
    """The paper's Eq. (3): ``scale * d_model^-0.5 * min(step^-0.5, step * warmup^-1.5)``."""
    step = max(step, 1)
    return scale * d_model**-0.5 * min(step**-0.5, step * warmup**-1.5)


def inverse_sqrt_lr(step: int, peak_lr: float, warmup: int, init_lr: float = 0.0) -> float:
    """Linear warmup from ``init_lr`` to ``peak_lr``, then ``peak_lr * sqrt(warmup / step)``.

    With ``init_lr = 0`` and ``peak_lr = scale * (d_model * warmup)^-0.5`` this is ``noam_lr``.
    """
    step = max(step, 1)
    if step < warmup:
        return init_lr + (peak_lr - init_lr) * step / warmup
    return peak_lr * math.sqrt(warmup / step)


def learning_rate(step: int, cfg: OptimConfig, d_model: int) -> float:
    """The lr for update ``step`` under ``cfg.schedule``."""
    if cfg.schedule == "noam":
        return noam_lr(step, d_model, cfg.warmup_updates, cfg.lr_scale)
    if cfg.schedule == "inverse_sqrt":
        return inverse_sqrt_lr(step, cfg.lr, cfg.warmup_updates, cfg.warmup_init_lr)
    raise ValueError(f"optim.schedule must be 'noam' or 'inverse_sqrt', got {cfg.schedule!r}")
