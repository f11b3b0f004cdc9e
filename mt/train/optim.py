"""Adam (Kingma & Ba 2015) with the paper's betas (0.9, 0.98) and eps 1e-9."""

from __future__ import annotations

import torch
from torch import nn

from mt.config import OptimConfig


def build_optimizer(model: nn.Module, cfg: OptimConfig) -> torch.optim.Optimizer:
    """Adam, or AdamW with decoupled decay on weight matrices only when ``weight_decay > 0``.

    Biases, LayerNorm and embeddings' pad rows are never decayed (matrices only: ``ndim >= 2``).
    The lr set here is a placeholder: the loop writes ``learning_rate(step)`` before every update.
    """
    betas = (float(cfg.betas[0]), float(cfg.betas[1]))
    params = [p for p in model.parameters() if p.requires_grad]
    if cfg.weight_decay <= 0:
        return torch.optim.Adam(params, lr=0.0, betas=betas, eps=cfg.eps, fused=cfg.fused or None)
    decay = [p for p in params if p.ndim >= 2]
    no_decay = [p for p in params if p.ndim < 2]
    groups = [
        {"params": decay, "weight_decay": cfg.weight_decay},
        {"params": no_decay, "weight_decay": 0.0},
    ]
    return torch.optim.AdamW(groups, lr=0.0, betas=betas, eps=cfg.eps, fused=cfg.fused or None)


def set_lr(optimizer: torch.optim.Optimizer, lr: float) -> None:
    for group in optimizer.param_groups:
        group["lr"] = lr
