"""Normalization layers: LayerNorm (the paper) or RMSNorm (Zhang & Sennrich 2019)."""

from __future__ import annotations

from torch import nn

NORMS = ("layernorm", "rmsnorm")
NORM_EPS = 1e-5  # nn.LayerNorm's default; RMSNorm uses the same so that switching changes one thing


def make_norm(kind: str, dim: int) -> nn.LayerNorm | nn.RMSNorm:
    """A normalization over the last dimension of size ``dim``: ``layernorm`` (gain and shift, 2 * dim
    parameters) or ``rmsnorm`` (x / rms(x) * gain, no mean subtraction, no shift: dim parameters)."""
    if kind == "layernorm":
        return nn.LayerNorm(dim, eps=NORM_EPS)
    if kind == "rmsnorm":
        return nn.RMSNorm(dim, eps=NORM_EPS)
    raise ValueError(f"norm must be one of {' | '.join(NORMS)}, got {kind!r}")
