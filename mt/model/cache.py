"""Decoding state: encoder output and the decoder's per-layer key/value cache.

Incremental decoding feeds the decoder only the new token(s) each step. Self-attention keys/values of
the earlier steps are kept per layer and grown by one step at a time; encoder-decoder keys/values
depend only on the source, so they are computed once on the first step. Beam search selects, repeats
or drops hypotheses with ``reorder(index)``, which must touch every cached tensor (a missed one decodes
silently wrong), so it lives here, next to the fields it has to cover.

Both ``reorder`` methods work in place and return ``self``, so ``cache.reorder(i)`` and
``cache = cache.reorder(i)`` are equally right.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import torch
from torch import Tensor


@dataclass
class EncoderOut:
    """What the decoder reads from the encoder: ``out`` (B, S, D) and ``pad_mask`` (B, S), True = padding."""

    out: Tensor
    pad_mask: Tensor
    rows: Tensor | None = None  # (B,) the encoded row each row is a copy of (None: itself)

    def reorder(self, index: Tensor) -> EncoderOut:
        """Keep rows ``index`` (LongTensor (B',); may permute, repeat or drop rows), in place."""
        self.rows = source_rows(self.rows, self.out.size(0), self.out.device).index_select(0, index)
        self.out = self.out.index_select(0, index)
        self.pad_mask = self.pad_mask.index_select(0, index)
        return self


def source_rows(rows: Tensor | None, n: int, device: torch.device) -> Tensor:
    return torch.arange(n, device=device) if rows is None else rows


@dataclass
class LayerCache:
    """One decoder layer's keys and values, each (B, H, len, Dh).

    ``self_k``/``self_v`` hold every step decoded so far (len = t) and grow by one step per call;
    ``cross_k``/``cross_v`` hold the projected source (len = S), filled on the first call.
    """

    self_k: Tensor | None = None
    self_v: Tensor | None = None
    cross_k: Tensor | None = None
    cross_v: Tensor | None = None

    def reorder(self, index: Tensor, cross: bool = True) -> LayerCache:
        """Select rows ``index`` of the self-attention K/V and, when ``cross``, of the source K/V."""
        for name in ("self_k", "self_v", "cross_k", "cross_v") if cross else ("self_k", "self_v"):
            tensor = getattr(self, name)
            if tensor is not None:
                setattr(self, name, tensor.index_select(0, index))
        return self


@dataclass
class DecoderCache:
    """The decoder's state between incremental ``decode`` calls.

    ``layers``: one ``LayerCache`` per decoder layer. ``src_pad_mask`` (B, S): the source padding mask,
    kept from the first call so that later calls need nothing else from the encoder output.
    ``src_rows`` (B,): the encoded sentence each row's source K/V belong to (``EncoderOut.rows``).
    Beam search reorders rows only among the beams of one sentence, which share their source K/V; when
    every row keeps its sentence, the source K/V (the largest cached tensors) need no copy.
    """

    layers: list[LayerCache] = field(default_factory=list)
    src_pad_mask: Tensor | None = None
    src_rows: Tensor | None = None

    @property
    def length(self) -> int:
        """Target steps decoded so far (the position of the next token)."""
        first = self.layers[0].self_k if self.layers else None
        return 0 if first is None else first.size(2)

    def reorder(self, index: Tensor) -> DecoderCache:
        """Keep rows ``index`` (LongTensor (B',); may permute, repeat or drop rows) everywhere, in place."""
        new_rows = None if self.src_rows is None else self.src_rows.index_select(0, index)
        same_source = new_rows is not None and torch.equal(new_rows, self.src_rows)
        for layer in self.layers:
            layer.reorder(index, cross=not same_source)
        if self.src_pad_mask is not None and not same_source:
            self.src_pad_mask = self.src_pad_mask.index_select(0, index)
        self.src_rows = new_rows
        return self
