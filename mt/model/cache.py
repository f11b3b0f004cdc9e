"""Decoding state: encoder output and the decoder's per-layer key/value cache.

Incremental decoding feeds the decoder only the new token(s) each step. Self-attention keys/values of
the earlier steps are kept per layer and grown by one step at a time; encoder-decoder keys/values
depend only on the source, so they are computed once on the first step. Beam search selects, repeats
or drops hypotheses with ``reorder(index)``, which must touch every cached tensor (a missed one decodes
silently wrong), so it lives here, next to the fields it has to cover.

Grouped rows (beam search): the source keys/values are kept once per sentence, (B, H, S, Dh) instead
of (B*g, H, S, Dh), while ``g`` consecutive decoder rows (its beams) read them, and the g rows of a
group attend to them together (``grouped_attention``). Groups arise when the encoder output given to
the first cached ``decode`` holds ``g`` consecutive copies of each sentence (``EncoderOut.rows``, e.g.
``[0 0 0 0 1 1 1 1]``), or when a reorder fans each row out into a run of ``g`` copies (beam search
decodes step 0 with one row per sentence, then continues with K). A reorder that keeps every row in
its group (beams of one sentence swapping and repeating) leaves them untouched; one that drops whole
groups (finished sentences) keeps the surviving groups; anything else falls back to one source row
per decoder row, so ``reorder`` stays correct for any index.

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
        rows = torch.arange(self.out.size(0), device=self.out.device) if self.rows is None else self.rows
        self.rows = rows.index_select(0, index)
        self.out = self.out.index_select(0, index)
        self.pad_mask = self.pad_mask.index_select(0, index)
        return self

    def copies_per_group(self) -> int:
        """``g`` when the rows are consecutive groups of ``g`` copies of one encoded row each, else 1."""
        return 1 if self.rows is None else run_length(self.rows)


def run_length(values: Tensor) -> int:
    """``g`` when ``values`` (N,) is consecutive runs of ``g`` equal entries (e.g. 0 0 0 1 1 1), else 1."""
    if values.numel() < 2:
        return 1
    g = int(torch.unique_consecutive(values, return_counts=True)[1][0])
    if g == 1 or values.numel() % g:
        return 1
    runs = values.view(-1, g)  # (N / g, g)
    return g if bool((runs == runs[:, :1]).all()) else 1


class LayerCache:
    """One decoder layer's keys and values.

    Self-attention K/V live in a time-major store (capacity, rows, H, Dh) whose first ``length`` steps
    are valid; ``self_k``/``self_v`` are (rows, H, length, Dh) views of it, which attention reads as
    they are. Time-major, a step is appended in place (no ``cat`` that copies the whole history every
    step) and a reorder is one ``index_select`` into a spare store (the two are swapped), so each step
    copies the history once instead of twice. ``cross_k``/``cross_v`` (rows / group, H, S, Dh) hold the
    projected source (one row per group of decoder rows, see the module doc), filled on the first call.
    """

    def __init__(self) -> None:
        self.length = 0
        self._keys: Tensor | None = None  # (capacity, rows, H, Dh)
        self._values: Tensor | None = None
        self._spare: tuple[Tensor, Tensor] | None = None  # reorder target, same layout
        self.cross_k: Tensor | None = None
        self.cross_v: Tensor | None = None

    @property
    def self_k(self) -> Tensor | None:
        """Keys of the steps so far, (rows, H, length, Dh), or None before the first step."""
        return None if self._keys is None else self._keys[: self.length].permute(1, 2, 0, 3)

    @property
    def self_v(self) -> Tensor | None:
        return None if self._values is None else self._values[: self.length].permute(1, 2, 0, 3)

    def append(self, k: Tensor, v: Tensor) -> tuple[Tensor, Tensor]:
        """Add this call's k, v (rows, H, T, Dh); return all keys and values (rows, H, length + T, Dh)."""
        steps = k.size(2)
        needed = self.length + steps
        if self._keys is None or needed > self._keys.size(0):
            self._keys, self._values = self._grow(self._keys, k, needed), self._grow(self._values, v, needed)
            self._spare = None
        self._keys[self.length : needed] = k.permute(2, 0, 1, 3)  # (T, rows, H, Dh)
        self._values[self.length : needed] = v.permute(2, 0, 1, 3)
        self.length = needed
        return self.self_k, self.self_v  # type: ignore[return-value]

    def _grow(self, store: Tensor | None, new: Tensor, needed: int) -> Tensor:
        """A store of capacity >= ``needed`` (doubling), holding the valid steps of ``store``."""
        rows, heads, _, head_dim = new.shape
        capacity = max(16, needed, 2 * (store.size(0) if store is not None else 0))
        grown = new.new_empty(capacity, rows, heads, head_dim)
        if store is not None and self.length:
            grown[: self.length] = store[: self.length]
        return grown

    def reorder(self, index: Tensor, cross_index: Tensor | None) -> LayerCache:
        """Select rows ``index`` of the self-attention K/V and rows ``cross_index`` (None: all, as they
        are) of the source K/V."""
        if self._keys is not None and self._values is not None:
            shape = (self._keys.size(0), index.numel(), *self._keys.shape[2:])
            if self._spare is None or self._spare[0].shape != shape:
                self._spare = (self._keys.new_empty(shape), self._values.new_empty(shape))
            spare_k, spare_v = self._spare
            for store, spare in ((self._keys, spare_k), (self._values, spare_v)):
                if store.requires_grad:  # out= does not support autograd (decoding under grad, e.g. tests)
                    spare[: self.length] = store[: self.length].index_select(1, index)
                else:
                    torch.index_select(store[: self.length], 1, index, out=spare[: self.length])
            if spare_k.size(1) == self._keys.size(1):  # same row count: keep the old store as the next spare
                self._spare = (self._keys, self._values)
            else:
                self._spare = None
            self._keys, self._values = spare_k, spare_v
        if cross_index is not None and self.cross_k is not None and self.cross_v is not None:
            self.cross_k = self.cross_k.index_select(0, cross_index)
            self.cross_v = self.cross_v.index_select(0, cross_index)
        return self


@dataclass
class DecoderCache:
    """The decoder's state between incremental ``decode`` calls.

    ``layers``: one ``LayerCache`` per decoder layer. ``src_pad_mask`` (B / group, S): the source padding
    mask of each source row, kept from the first call so that later calls need nothing else from the
    encoder output. ``group``: decoder rows per source row (beam size in beam search, else 1).
    """

    layers: list[LayerCache] = field(default_factory=list)
    src_pad_mask: Tensor | None = None
    group: int = 1

    @property
    def length(self) -> int:
        """Target steps decoded so far (the position of the next token)."""
        return self.layers[0].length if self.layers else 0

    def reorder(self, index: Tensor) -> DecoderCache:
        """Keep rows ``index`` (LongTensor (B',); may permute, repeat or drop rows) everywhere, in place."""
        cross_index = self._cross_index(index)
        for layer in self.layers:
            layer.reorder(index, cross_index)
        if self.src_pad_mask is not None and cross_index is not None:
            self.src_pad_mask = self.src_pad_mask.index_select(0, cross_index)
        return self

    def _cross_index(self, index: Tensor) -> Tensor | None:
        """The source rows the new rows ``index`` need, or None when they are all kept as they are.

        Sets ``group`` to the length of the equal runs the new rows' sources come in: the old group
        when beams swap within a sentence or whole sentences drop, K when beam search's first step
        fans one row per sentence out to K, else 1 (one source row per decoder row)."""
        sources = index // self.group  # (B',) the source row of each new row
        g = self.group = run_length(sources)
        kept = sources[::g]  # (B' / g,)
        n_sources = self.src_pad_mask.size(0) if self.src_pad_mask is not None else -1
        if kept.numel() == n_sources and torch.equal(kept, torch.arange(n_sources, device=kept.device)):
            return None
        return kept
