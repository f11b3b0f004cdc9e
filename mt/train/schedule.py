"""Learning-rate schedules as pure functions of the update number (1-based) and the budget spent."""

from __future__ import annotations

import math

from mt.config import OptimConfig, TrainConfig


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


def budget_factor(progress: float, kind: str) -> float:
    """The lr multiplier of ``optim.budget_decay`` after ``progress`` (0 to 1) of the training budget:
    ``none`` 1; ``linear`` 1 - p; ``cosine`` (1 + cos(pi p)) / 2 (Li et al. 2020, budgeted training)."""
    p = min(max(progress, 0.0), 1.0)
    if kind == "none":
        return 1.0
    if kind == "linear":
        return 1.0 - p
    if kind == "cosine":
        return 0.5 * (1.0 + math.cos(math.pi * p))
    raise ValueError(f"optim.budget_decay must be 'none', 'linear' or 'cosine', got {kind!r}")


def budget_progress(step: int, seconds: float, cfg: TrainConfig) -> float:
    """How much of the training budget is spent after ``step`` updates and ``seconds`` of training:
    the larger of ``step / max_updates`` and ``seconds / max_time_minutes`` (a limit of 0 is none)."""
    by_updates = step / cfg.max_updates if cfg.max_updates > 0 else 0.0
    by_time = seconds / (60 * cfg.max_time_minutes) if cfg.max_time_minutes > 0 else 0.0
    return min(max(by_updates, by_time), 1.0)


def learning_rate(step: int, cfg: OptimConfig, d_model: int, progress: float = 0.0) -> float:
    """The lr for update ``step`` under ``cfg.schedule``, times ``cfg.budget_decay``'s factor at
    ``progress`` (``budget_progress``)."""
    if cfg.schedule == "noam":
        lr = noam_lr(step, d_model, cfg.warmup_updates, cfg.lr_scale)
    elif cfg.schedule == "inverse_sqrt":
        lr = inverse_sqrt_lr(step, cfg.lr, cfg.warmup_updates, cfg.warmup_init_lr)
    else:
        raise ValueError(f"optim.schedule must be 'noam' or 'inverse_sqrt', got {cfg.schedule!r}")
    return lr * budget_factor(progress, cfg.budget_decay)
