"""Decoding state: encoder output and the decoder's per-layer key/value cache.

Incremental decoding feeds the decoder only the new token(s) each step. Self-attention keys/values of
the earlier steps are kept per layer and grown by one step at a time; encoder-decoder keys/values
depend only on the source, so they are computed once on the first step. Beam search selects, repeats
or drops hypotheses with ``reorder(index)``, which must touch every cached tensor (a missed one decodes
silently wrong), so it lives here, next to the fields it has to cover.

Grouped rows (beam search): the source keys/values are kept once per sentence, (B, H, S, Dh) instead
of (B*g, H, S, Dh), while ``g`` consecutive decoder rows (its beams) read them, and the g rows of a
group attend to them together (``grouped_attention``). The group's self-attention keys/values share
one store too, with a slot per row: every step each row writes its own slot, and the slot table
(``DecoderCache.slots``) records which slot each row reads at each step, its ancestor's. Beams that
swap or repeat within a sentence change only that table (no stored key moves: before this, every
beam search step copied the whole self-attention history of every row). Groups arise when the
encoder output given to the first cached ``decode`` holds ``g`` consecutive copies of each sentence
(``EncoderOut.rows``, e.g. ``[0 0 0 0 1 1 1 1]``), or when a reorder fans each row out into a run of
``g`` copies (beam search decodes step 0 with one row per sentence, then continues with K). A
reorder that keeps every row in its group leaves the stores untouched; one that drops whole groups
(finished sentences) copies only the groups that move (``take_rows``); anything else falls back to
one row per group, each with its own copy of the keys it reads, so ``reorder`` stays correct for
any index.

Both ``reorder`` methods work in place and return ``self``, so ``cache.reorder(i)`` and
``cache = cache.reorder(i)`` are equally right.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import torch
from torch import Tensor

from mt.model.attention import causal_mask


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

    Self-attention K/V live in a store (G, capacity, g, H, Dh): G groups of ``g`` consecutive decoder
    rows (``DecoderCache.group``; 1 unless beam search groups a sentence's beams), and for every group,
    step and slot the key that the group's row in that slot produced at that step; the first
    ``length`` steps are valid. With g == 1 each row is a group and reads its own keys. With g > 1 a
    row reads, at each step, the slot of its ancestor (``slot_mask``, set by ``DecoderCache`` for
    every call), so reordering the beams of a sentence moves no stored key at all: only the small
    slot table changes. The K/V of a group's ``length * g`` keys are one (G, H, length * g, Dh) view,
    which attention reads with the mask (``grouped_attention``).

    ``cross_k``/``cross_v`` (G, H, S, Dh) hold the projected source, one row per group, filled on the
    first call.
    """

    def __init__(self) -> None:
        self.length = 0
        self.group = 1  # decoder rows per group, set by DecoderCache
        self.slot_mask: Tensor | None = None  # (G, 1, g*T, (length + T)*g) additive, this call's (g > 1)
        self._keys: Tensor | None = None  # (G, capacity, g, H, Dh)
        self._values: Tensor | None = None
        self.cross_k: Tensor | None = None
        self.cross_v: Tensor | None = None

    @property
    def self_k(self) -> Tensor | None:
        """Stored keys per group, (G, H, length * g, Dh) (step-major, slot-minor); with g == 1 these are
        each row's keys in order, (rows, H, length, Dh). None before the first step."""
        return None if self._keys is None else self._view(self._keys)

    @property
    def self_v(self) -> Tensor | None:
        return None if self._values is None else self._view(self._values)

    def _view(self, store: Tensor) -> Tensor:
        return store[:, : self.length].flatten(1, 2).transpose(1, 2)  # (G, L, g, H, Dh) -> (G, H, L*g, Dh)

    def append(self, k: Tensor, v: Tensor) -> tuple[Tensor, Tensor, Tensor | None]:
        """Add this call's k, v (rows, H, T, Dh); return the keys and values to attend to, each
        (G, H, (length + T) * g, Dh), and the slot mask (None when g == 1: plain causal attention)."""
        rows, heads, steps, head_dim = k.shape
        g, needed = self.group, self.length + steps
        if self._keys is None or needed > self._keys.size(1):
            self._keys, self._values = self._grow(self._keys, k, needed), self._grow(self._values, v, needed)
        for store, new in ((self._keys, k), (self._values, v)):
            # (rows, H, T, Dh) -> (G, g, H, T, Dh) -> (G, T, g, H, Dh)
            store[:, self.length : needed] = new.view(rows // g, g, heads, steps, head_dim).permute(0, 3, 1, 2, 4)
        self.length = needed
        return self.self_k, self.self_v, self.slot_mask  # type: ignore[return-value]

    def _grow(self, store: Tensor | None, new: Tensor, needed: int) -> Tensor:
        """A store of capacity >= ``needed`` (doubling), holding the valid steps of ``store``."""
        rows, heads, _, head_dim = new.shape
        capacity = max(32, needed, 2 * (store.size(1) if store is not None else 0))
        grown = new.new_empty(rows // self.group, capacity, self.group, heads, head_dim)
        if store is not None and self.length:
            grown[:, : self.length] = store[:, : self.length]
        return grown

    def select_groups(self, groups: Tensor) -> None:
        """Keep groups ``groups`` (G',) of the self- and source K/V (may repeat or drop groups)."""
        for name in ("_keys", "_values"):
            store = getattr(self, name)
            if store is not None:
                setattr(self, name, take_rows(store, groups, self.length))
        self._select_source(groups)

    def _select_source(self, groups: Tensor) -> None:
        for name in ("cross_k", "cross_v"):
            store = getattr(self, name)
            if store is not None:
                setattr(self, name, take_rows(store, groups))

    def widen(self, group: int) -> None:
        """Make room for ``group`` > g slots per group (a fan-out); stored slots keep their numbers."""
        for name in ("_keys", "_values"):
            store = getattr(self, name)
            if store is not None:
                wide = store.new_empty(store.size(0), store.size(1), group, *store.shape[3:])
                # zeros, not garbage, in the new slots of past steps: they are masked out, but a masked
                # NaN would still poison the softmax and the weighted sum (later steps fill every slot)
                wide[:, : self.length].zero_()
                wide[:, : self.length, : store.size(2)] = store[:, : self.length]
                setattr(self, name, wide)

    def materialize(self, groups: Tensor, slots: Tensor) -> None:
        """One group per row again: row i gets the keys of old group ``groups[i]`` at the slots
        ``slots[i]`` (length,) it reads, and the source K/V of that group."""
        steps = torch.arange(self.length, device=groups.device)
        for name in ("_keys", "_values"):
            store = getattr(self, name)
            if store is not None:
                history = store[groups.unsqueeze(1), steps.unsqueeze(0), slots]  # (rows', L, H, Dh)
                own = store.new_empty(groups.numel(), store.size(1), 1, *store.shape[3:])
                own[:, : self.length, 0] = history
                setattr(self, name, own)
        self._select_source(groups)


@dataclass
class DecoderCache:
    """The decoder's state between incremental ``decode`` calls.

    ``layers``: one ``LayerCache`` per decoder layer. ``src_pad_mask`` (B / group, S): the source padding
    mask of each source row, kept from the first call so that later calls need nothing else from the
    encoder output. ``group``: decoder rows per group (beam size in beam search, else 1). ``slots``
    (rows, length), only when group > 1: the slot of the self-attention key each row reads at each
    step (its ancestor's), see ``LayerCache``.
    """

    layers: list[LayerCache] = field(default_factory=list)
    src_pad_mask: Tensor | None = None
    group: int = 1
    slots: Tensor | None = None
    _source_bias: Tensor | None = None  # src_pad_mask as an additive mask, made once per reorder

    def source_bias(self, dtype: torch.dtype) -> Tensor:
        """The encoder-decoder attention mask (B / group, 1, 1, S): 0 for a source token, -inf for
        padding. Additive, so attention does not convert a bool mask in every layer at every step."""
        assert self.src_pad_mask is not None, "the first decode call sets the source pad mask"
        if self._source_bias is None or self._source_bias.dtype != dtype:
            bias = torch.zeros(self.src_pad_mask.shape, dtype=dtype, device=self.src_pad_mask.device)
            self._source_bias = bias.masked_fill_(self.src_pad_mask, float("-inf"))[:, None, None, :]
        return self._source_bias

    @property
    def length(self) -> int:
        """Target steps decoded so far (the position of the next token)."""
        return self.layers[0].length if self.layers else 0

    def set_group(self, group: int) -> None:
        """Declare ``group`` rows per group before the first call (consecutive copies of a sentence)."""
        self.group = group
        for layer in self.layers:
            layer.group = group

    def begin_call(self, rows: int, steps: int, dtype: torch.dtype, device: torch.device) -> None:
        """Before a ``decode`` of ``steps`` new tokens for ``rows`` rows: extend the slot table (each
        row's new keys go in its own slot) and give every layer this call's attention mask."""
        g = self.group
        if g == 1:
            for layer in self.layers:
                layer.slot_mask = None
            return
        own = (torch.arange(rows, device=device) % g).unsqueeze(1).expand(rows, steps)  # (rows, T)
        self.slots = own if self.slots is None else torch.cat([self.slots, own], dim=1)  # (rows, L)
        length = self.slots.size(1)
        allowed = self.slots.unsqueeze(-1) == torch.arange(g, device=device)  # (rows, L, g)
        allowed = allowed.unsqueeze(1)  # (rows, 1, L, g)
        if steps > 1:  # query i of the call sits at step length - T + i and sees steps up to it
            allowed = allowed & causal_mask(steps, length, device)[None, :, :, None]  # (rows, T, L, g)
        allowed = allowed.expand(rows, steps, length, g).reshape(rows // g, 1, g * steps, length * g)
        mask = torch.zeros(allowed.shape, dtype=dtype, device=device).masked_fill_(~allowed, float("-inf"))
        for layer in self.layers:
            layer.slot_mask = mask

    def reorder(self, index: Tensor) -> DecoderCache:
        """Keep rows ``index`` (LongTensor (B',); may permute, repeat or drop rows) everywhere, in place.

        The new rows come from old groups ``index // group``; they form groups again when those come in
        equal runs (beams swapping or repeating within a sentence, sentences dropping out, one row per
        sentence fanning out to K), and then only dropped or repeated groups are copied. Otherwise
        every row becomes a group of one with its own copy of the keys it reads."""
        g = self.group
        sources = index // g  # (B',) the old group of each new row
        new_g = run_length(sources)
        if 1 < new_g < g:  # fewer slots than are stored: no room to keep the slot numbers
            new_g = 1
        if new_g == 1 and g > 1:
            slots = self._slots_of(index)
            for layer in self.layers:
                layer.materialize(sources, slots)
            self._select_source_rows(sources)
        else:
            kept = sources[::new_g]  # (B' / g',) the old group of each new group
            if not self._is_identity(kept):
                for layer in self.layers:
                    layer.select_groups(kept)
                self._select_source_rows(kept)
            if new_g > g:
                for layer in self.layers:
                    layer.widen(new_g)
        self.slots = self._slots_of(index) if new_g > 1 else None
        self.set_group(new_g)
        return self

    def _slots_of(self, index: Tensor) -> Tensor:
        """The slot each new row ``index`` reads at each past step, (B', length): its old row's (0 for
        every step while there were no groups)."""
        if self.slots is not None:
            return self.slots.index_select(0, index)
        return torch.zeros(index.numel(), self.length, dtype=torch.long, device=index.device)

    def _is_identity(self, groups: Tensor) -> bool:
        n_groups = self.src_pad_mask.size(0) if self.src_pad_mask is not None else -1
        return groups.numel() == n_groups and torch.equal(groups, torch.arange(n_groups, device=groups.device))

    def _select_source_rows(self, groups: Tensor) -> None:
        if self.src_pad_mask is not None:
            self.src_pad_mask = self.src_pad_mask.index_select(0, groups)
            self._source_bias = None


def take_rows(store: Tensor, index: Tensor, steps: int | None = None) -> Tensor:
    """``store.index_select(0, index)``, but in place when most rows stay where they are.

    When finished sentences leave a batch and the last ones move into their places (beam search
    orders its sentences that way), ``index`` is ``0 .. G'-1`` but for a few entries: only those rows
    are copied, into ``store`` itself, and the result is the view ``store[:G']``; with ``steps``, only
    the first ``steps`` entries of dim 1 (the valid part of a K/V store) are copied. (Not under
    autograd: in-place writes into tensors that may be views of a graph's outputs are not allowed.)
    """
    n = index.numel()
    if store.requires_grad or n > store.size(0):
        return store.index_select(0, index)
    moved = (index != torch.arange(n, device=index.device)).nonzero().squeeze(1)  # (m,)
    if 2 * moved.numel() > n:
        return store.index_select(0, index)
    if moved.numel():
        valid = store if steps is None else store[:, :steps]
        valid[moved] = valid.index_select(0, index[moved])  # sources are read before any row is written
    return store[:n]
