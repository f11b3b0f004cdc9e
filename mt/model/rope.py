"""Rotary position embeddings (Su et al. 2021, "RoFormer"), applied to self-attention queries and keys.

Each head's vector is split into halves ``[x1 | x2]`` (the GPT-NeoX / Hugging Face Llama layout, not
the interleaved pairs of the paper: the same family of rotations with the columns permuted), and pair
``i`` of a token at position ``p`` is rotated by the angle ``p * base^(-2i / Dh)``::

    rope(x, p) = [x1 * cos - x2 * sin | x2 * cos + x1 * sin]

The dot product of a rotated query at ``p`` and a rotated key at ``q`` then depends on ``p - q`` only.
A cached decoder rotates each key once, at its own position, before it is stored.
"""

from __future__ import annotations

import torch
from torch import Tensor, nn

ROPE_BASE = 10000.0  # the paper's base period; exporters pass it on (CTranslate2's rotary_base)


def rope_angles(positions: Tensor, head_dim: int, base: float = ROPE_BASE) -> Tensor:
    """Angles (len, Dh/2) of ``positions`` (len,), in float32."""
    inv_freq = base ** (-torch.arange(0, head_dim, 2, dtype=torch.float32, device=positions.device) / head_dim)
    return positions.to(torch.float32)[:, None] * inv_freq[None, :]


class RotaryEmbedding(nn.Module):
    """Rotates (B, H, T, Dh) tensors by their positions; no parameters (cos/sin tables are buffers).

    Tables for ``max_positions`` are precomputed as non-persistent buffers; positions past them are
    computed on the fly, so, like the sinusoidal encodings, there is no hard length limit.
    """

    def __init__(self, head_dim: int, max_positions: int, base: float = ROPE_BASE) -> None:
        super().__init__()
        if head_dim % 2:
            raise ValueError(f"rotary position embeddings need an even head dimension, got {head_dim}")
        self.head_dim, self.base = head_dim, base
        angles = rope_angles(torch.arange(max_positions), head_dim, base)  # (P, Dh/2)
        self.register_buffer("cos", angles.cos(), persistent=False)
        self.register_buffer("sin", angles.sin(), persistent=False)

    def tables(self, start: int | Tensor, length: int) -> tuple[Tensor, Tensor]:
        """cos, sin (T, Dh/2) of positions ``start .. start + length - 1``; for a per-row ``start`` (B,),
        (B, 1, T, Dh/2), broadcasting over heads (a ragged decoding batch, ``mt.model.cache``)."""
        cos: Tensor = self.cos  # type: ignore[assignment]
        sin: Tensor = self.sin  # type: ignore[assignment]
        if isinstance(start, Tensor):
            positions = start.unsqueeze(1) + torch.arange(length, device=start.device)  # (B, T)
            return cos[positions].unsqueeze(1), sin[positions].unsqueeze(1)
        if start + length <= cos.size(0):
            return cos[start : start + length], sin[start : start + length]
        angles = rope_angles(torch.arange(start, start + length, device=cos.device), self.head_dim, self.base)
        return angles.cos(), angles.sin()

    def forward(self, x: Tensor, start: int | Tensor = 0) -> Tensor:
        """x (B, H, T, Dh) at positions ``start ..`` (an int, or (B,)) -> rotated (B, H, T, Dh), in x's dtype."""
        cos, sin = (t.to(x.dtype) for t in self.tables(start, x.size(-2)))  # (T, Dh/2) or (B, 1, T, Dh/2)
        x1, x2 = x.chunk(2, dim=-1)  # (B, H, T, Dh/2) each
        return torch.cat([x1 * cos - x2 * sin, x2 * cos + x1 * sin], dim=-1)
