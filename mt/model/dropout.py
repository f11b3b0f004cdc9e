"""Dropout (Srivastava et al. 2014; the paper's section 5.4) with a cheap random mask on CPU.

``torch.nn.Dropout`` on CPU draws its mask with ``bernoulli_``, about 12 ns an element on this project's
machine: 10-16% of a ``transformer_small`` update (torch.profiler, fp32 and bf16). Here the mask comes from
15 random bits an element, cut from ``int64`` draws of the same CPU generator (``random_``: ~1 ns an
element), compared with ``round((1 - p) * 2^15)``; an element is kept with probability
``keep = round((1 - p) * 2^15) / 2^15`` (within 2^-16 of ``1 - p``) and the kept ones are scaled by
``1 / keep``, so the output's expectation is still the input (inverted dropout). Backward multiplies by the
same saved mask (one byte an element; torch saves one of the input's dtype). Off the CPU, and for
``p`` of 0 or 1, it is ``torch.nn.functional.dropout``.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import Tensor, nn

MASK_BITS = 15
MASK_LEVELS = 1 << MASK_BITS  # 32768


def keep_threshold(p: float) -> int:
    """The 15-bit level below which an element is kept: ``round((1 - p) * 2^15)``."""
    return round((1.0 - p) * MASK_LEVELS)


def random_keep_mask(shape: torch.Size, p: float) -> Tensor:
    """A bool mask of ``shape``, True with probability ``keep_threshold(p) / 2^15``, from the CPU generator."""
    n = shape.numel()
    words = torch.empty((n + 3) // 4, dtype=torch.int64).random_()  # 63 random bits each
    levels = words.view(torch.int16)[:n].view(shape) & (MASK_LEVELS - 1)  # 15 bits an element: 0 .. 2^15 - 1
    return levels < keep_threshold(p)


class _MaskedScale(torch.autograd.Function):
    """``x * mask / keep`` with ``mask`` (bool) saved for the backward pass."""

    @staticmethod
    def forward(ctx, x: Tensor, p: float) -> Tensor:
        mask = random_keep_mask(x.shape, p)
        scale = MASK_LEVELS / keep_threshold(p)
        ctx.save_for_backward(mask)
        ctx.scale = scale
        return x.mul(mask).mul_(scale)

    @staticmethod
    def backward(ctx, grad: Tensor) -> tuple[Tensor, None]:
        (mask,) = ctx.saved_tensors
        return grad.mul(mask).mul_(ctx.scale), None


def dropout(x: Tensor, p: float, training: bool) -> Tensor:
    """Inverted dropout of ``x`` (any shape); the identity when not ``training``."""
    if not training or p == 0.0:
        return x
    if x.device.type != "cpu" or keep_threshold(p) in (0, MASK_LEVELS):  # p = 1 (or within 2^-16 of 0 or 1)
        return F.dropout(x, p, training=True)
    return _MaskedScale.apply(x, p)


class Dropout(nn.Module):
    """``nn.Dropout``'s interface and state (none), with ``dropout`` above as its forward."""

    def __init__(self, p: float = 0.5) -> None:
        super().__init__()
        if not 0.0 <= p <= 1.0:
            raise ValueError(f"dropout probability must be between 0 and 1, got {p}")
        self.p = p

    def forward(self, x: Tensor) -> Tensor:
        return dropout(x, self.p, self.training)

    def extra_repr(self) -> str:
        return f"p={self.p}"
