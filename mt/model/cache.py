"""Decoding state: the encoder output and the decoder's per-layer key/value cache.

Contract (``DecoderCache``; ``mt.model.beam_cache.BeamCache`` keeps the same one for beam search):

- ``model.decode(tgt_in (N, T), enc, cache)`` feeds only the new tokens; positions continue from
  ``cache.length``. Every layer appends its self-attention K/V (a buffer grown per step) and computes
  its encoder-decoder K/V from ``enc`` on the first call only; the source pad mask is kept from then.
- Row i of the cache continues row i of the previous call. ``reorder(index (N',))`` makes new row j
  continue old row ``index[j]`` (select, permute, repeat or drop rows), in place, returning ``self``.
- ``enc`` must hold the rows the cache reads its source from (here: one per decoder row); rows that
  disagree, or an index out of range, raise ValueError instead of decoding silently wrong.

Ragged batches (continuous batching): ``add_sentences`` appends rows for new sentences at step 0 to a
cache in use (their source K/V made by ``Decoder.source_keys``), so rows then stand at different steps.
Each row keeps its own step count (``row_lengths``): its next token's position, and the buffer step
its keys go to. A row's keys fill steps ``0 ..`` of its buffer row, shorter rows' later steps masked,
as source padding is: the same keys in the same places as decoding the sentence alone. Ragged calls
feed one token a row. Joining rows go into spare rows of the buffers (``append_rows``), and when rows
leave, the source steps that only they read are dropped (``narrow_source``): a pool handed over longest
sentence first then attends over its live rows' widest source, not the pool's.

Per call, ``start_call`` hands each layer an ``AttentionCache`` (a ``LayerStep``): its buffers plus the
masks of this call, built once for all layers.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from functools import cache, partial
from typing import Literal, NamedTuple, Protocol

import torch
import torch.nn.functional as F
from torch import Tensor

from mt.model.attention import CachedKeys


@dataclass
class EncoderOut:
    """What the decoder reads from the encoder: ``out`` (B, S, D) and ``pad_mask`` (B, S), True = padding."""

    out: Tensor
    pad_mask: Tensor

    def reorder(self, index: Tensor) -> EncoderOut:
        """Keep rows ``index`` (LongTensor (B',); may permute, repeat or drop rows), in place."""
        check_index(index, self.out.size(0), "encoder output")
        self.out = self.out.index_select(0, index)
        self.pad_mask = self.pad_mask.index_select(0, index)
        return self

    def extend(self, other: EncoderOut) -> EncoderOut:
        """Append ``other``'s rows (new sentences), padding the shorter sources; in place."""
        width = max(self.out.size(1), other.out.size(1))
        self.out = torch.cat([pad_steps(self.out, width, dim=1), pad_steps(other.out, width, dim=1)])
        self.pad_mask = torch.cat([pad_mask_to(self.pad_mask, width), pad_mask_to(other.pad_mask, width)])
        return self


class KVBuffer:
    """Self-attention keys and values grown one step at a time (torchtune-style: a buffer and a slice).

    ``keys``/``values`` (rows, H, capacity, slots, Dh), the first ``length`` steps valid. ``slots`` is 1
    for one decoder row per buffer row; a beam store (``BeamCache``) keeps a sentence's K beams in K
    slots of one row. ``view`` is (rows, H, length * slots, Dh), step-major, slot-minor: a slice of the
    buffer whose (rows, H) dims merge, so attention's batched matmuls read it in place (head-minor
    buffers made every step copy the whole cache; 16% of transformer_mini's decoding time).
    """

    def __init__(self) -> None:
        self.length = 0
        self.keys: Tensor | None = None
        self.values: Tensor | None = None
        self._allocations: dict[str, Tensor] = {}  # ``add_rows``: storage with room for more rows

    def append(self, k: Tensor, v: Tensor, slots: int) -> tuple[Tensor, Tensor]:
        """Write this call's k, v (rows * slots, H, T, Dh) after the valid steps; return ``view``."""
        n, heads, steps, head_dim = k.shape
        needed = self.length + steps
        if self.keys is None or self.values is None or needed > self.keys.size(2):
            self.keys = self._grown(self.keys, k, needed, slots)
            self.values = self._grown(self.values, v, needed, slots)
        for store, new in ((self.keys, k), (self.values, v)):
            # (rows*slots, H, T, Dh) -> (rows, slots, H, T, Dh) -> (rows, H, T, slots, Dh)
            grouped = new.view(n // slots, slots, heads, steps, head_dim)
            store[:, :, self.length : needed] = grouped.permute(0, 2, 3, 1, 4)
        self.length = needed
        return self.view()

    def append_at(self, k: Tensor, v: Tensor, slots: int, at: Tensor, extent: int) -> tuple[Tensor, Tensor]:
        """Write one step's k, v (rows * slots, H, 1, Dh), buffer row r at step ``at[r]`` (a ragged
        batch); the valid steps become ``extent`` (> every ``at``); return ``view``."""
        n, heads, _, head_dim = k.shape
        if self.keys is None or self.values is None or extent > self.keys.size(2):
            self.keys = self._grown(self.keys, k, extent, slots)
            self.values = self._grown(self.values, v, extent, slots)
        rows = torch.arange(n // slots, device=k.device)
        for store, new in ((self.keys, k), (self.values, v)):
            # (rows*slots, H, 1, Dh) -> (rows, H, slots, Dh), the layout of store[rows, :, at]
            store[rows, :, at] = new.view(n // slots, slots, heads, head_dim).transpose(1, 2)
        self.length = extent
        return self.view()

    def reserve(self, extent: int) -> None:
        """Room for ``extent`` steps, the valid ones kept (for a writer other than ``append``: the C++ step,
        ``mt.model.native``). The buffer must hold something already."""
        assert self.keys is not None and self.values is not None, "nothing appended yet"
        if extent > self.keys.size(2):
            rows, heads, _, slots, head_dim = self.keys.shape
            like = self.keys.new_empty(rows * slots, heads, 1, head_dim)
            self.keys = self._grown(self.keys, like, extent, slots)
            self.values = self._grown(self.values, like, extent, slots)

    def add_rows(self, n: int) -> None:
        """Append ``n`` rows (what they hold is masked: finite stale keys or zeros, see ``append_rows``). When
        the buffer is the first rows of a larger allocation (rows that left, ``select_rows_``; or the spare
        rows this allocates), nothing is written, not even the new rows."""
        for name in ("keys", "values"):
            store = getattr(self, name)
            if store is not None:
                grown, self._allocations[name] = append_rows(store, n, self._allocations.get(name), self.length)
                setattr(self, name, grown)

    def view(self) -> tuple[Tensor, Tensor]:
        assert self.keys is not None and self.values is not None, "nothing appended yet"
        return tuple(s[:, :, : self.length].flatten(2, 3) for s in (self.keys, self.values))  # type: ignore[return-value]

    def _grown(self, store: Tensor | None, new: Tensor, needed: int, slots: int) -> Tensor:
        """A buffer of capacity >= ``needed`` (doubling), holding the valid steps of ``store``."""
        n, heads, _, head_dim = new.shape
        capacity = max(32, needed, 2 * (store.size(2) if store is not None else 0))
        # zeros: a ragged batch's shorter rows read (masked) steps they never wrote, which must be finite
        grown = new.new_zeros(n // slots, heads, capacity, slots, head_dim)
        if store is not None and self.length:
            grown[:, :, : self.length] = store[:, :, : self.length]
        return grown

    def select_rows_(self, index: Tensor, moves: RowMoves | None) -> None:
        """Keep buffer rows ``index``, moving only ``moves`` when given (``select_rows_``)."""
        if self.keys is not None and self.values is not None:
            self.keys = select_rows_(self.keys, index, self.length, moves)
            self.values = select_rows_(self.values, index, self.length, moves)

    def widen(self, slots: int) -> None:
        """Make room for ``slots`` slots per row (more than now); stored slots keep their numbers."""
        for name in ("keys", "values"):
            store = getattr(self, name)
            if store is not None:
                rows, heads, capacity, _, head_dim = store.shape
                # zeros, not garbage, in the new slots: they are masked out, but a masked NaN would still
                # poison the softmax and the weighted sum (and a ragged batch reads steps it never wrote)
                wide = store.new_zeros(rows, heads, capacity, slots, head_dim)
                wide[:, :, : self.length, : store.size(3)] = store[:, :, : self.length]
                setattr(self, name, wide)


@dataclass
class LayerKV:
    """One decoder layer's cached keys/values: self-attention (grown per step), encoder-decoder (once)."""

    self_attn: KVBuffer = field(default_factory=KVBuffer)
    cross_k: Tensor | None = None  # (rows, H, S, Dh), filled on the first call
    cross_v: Tensor | None = None
    # ``add_rows``: the allocations of cross_k / cross_v, with room for more rows and source steps
    _cross_allocations: list[Tensor | None] = field(default_factory=lambda: [None, None])

    def select_rows_(self, index: Tensor, moves: RowMoves | None) -> None:
        """Keep rows ``index`` of every buffer, moving only ``moves`` when given (``select_rows_``)."""
        self.self_attn.select_rows_(index, moves)
        if self.cross_k is not None and self.cross_v is not None:
            self.cross_k = select_rows_(self.cross_k, index, None, moves)
            self.cross_v = select_rows_(self.cross_v, index, None, moves)

    def add_rows(self, cross_k: Tensor, cross_v: Tensor) -> None:
        """Append rows for new sentences: their source keys and values (n, Hkv, S', Dh), the source steps
        widened to the longer of theirs and the rows' (the steps a row lacks are masked by the source pad
        mask). Rows go into spare rows of the allocation when it has them (``append_rows``)."""
        assert self.cross_k is not None and self.cross_v is not None, "add rows to a cache in use"
        self.self_attn.add_rows(cross_k.size(0))
        self.cross_k, self._cross_allocations[0] = append_rows(self.cross_k, cross_k, self._cross_allocations[0])
        self.cross_v, self._cross_allocations[1] = append_rows(self.cross_v, cross_v, self._cross_allocations[1])

    def narrow_source(self, steps: int) -> None:
        """Keep the first ``steps`` source steps of the encoder-decoder K/V (a view: the later ones are
        padding in every row left)."""
        if self.cross_k is not None and self.cross_v is not None:
            self.cross_k, self.cross_v = self.cross_k[:, :, :steps], self.cross_v[:, :, :steps]


@dataclass
class LayerStep:
    """One layer's cache during one call (an ``mt.model.attention.AttentionCache``): its buffers, this
    call's masks, and ``group`` decoder rows per buffer row (1, or a beam store's beams per sentence)."""

    kv: LayerKV
    source_mask: Tensor  # (rows, 1, 1, S) additive
    # builds the additive self-attention mask (rows, 1, group*T, L*group) when the Python step needs it, once
    # for all layers (``mask_once``; the C++ step reads ``at`` and ``slots`` itself); None: plain causal
    self_mask: Callable[[], Tensor] | None = None
    group: int = 1
    at: Tensor | None = None  # (rows,) a ragged batch's step of each buffer row; None: all at ``length``
    extent: int = 0  # with ``at``: the valid steps after this call
    slots: Tensor | None = None  # (rows * group, >= L) int32: the slot each decoder row reads at each step

    def self_kv(self, k: Tensor, v: Tensor) -> CachedKeys:
        mask = None if self.self_mask is None else self.self_mask()
        if self.at is not None:
            keys, values = self.kv.self_attn.append_at(k, v, self.group, self.at, self.extent)
            return CachedKeys(keys, values, mask, group=self.group)
        keys, values = self.kv.self_attn.append(k, v, self.group)
        return CachedKeys(keys, values, mask, is_causal=mask is None, group=self.group)

    def cross_kv(self, project: Callable[[], tuple[Tensor, Tensor]]) -> CachedKeys:
        if self.kv.cross_k is None or self.kv.cross_v is None:
            # contiguous once, so that every step's attention reads them in place
            self.kv.cross_k, self.kv.cross_v = (t.contiguous() for t in project())
        return CachedKeys(self.kv.cross_k, self.kv.cross_v, self.source_mask, group=self.group)


class DecodingState(Protocol):
    """What ``Decoder.forward`` needs from a cache: ``DecoderCache`` here, ``BeamCache`` for beam search."""

    @property
    def length(self) -> int: ...

    @property
    def positions(self) -> int | Tensor: ...

    def start_call(self, rows: int, steps: int, enc: EncoderOut, dtype: torch.dtype) -> list[LayerStep]: ...

    def reorder(self, index: Tensor) -> DecodingState: ...


class DecoderCache:
    """The plain decoding state (greedy, sampling, tests): decoder row i reads buffer row i."""

    def __init__(self, n_layers: int, move_rows: RowMover | None = None) -> None:
        self.layers = [LayerKV() for _ in range(n_layers)]
        self.move_rows = move_rows  # the C++ step's row mover (``mt.model.native``): few rows moved in one call
        self.src_pad_mask: Tensor | None = None  # (rows, S), kept from the first call
        self._source_bias: Tensor | None = None  # src_pad_mask as an additive mask, made once per reorder
        self.row_lengths: Tensor | None = None  # (rows,) steps of each row once ragged; None: all ``length``

    @property
    def length(self) -> int:
        """Target steps decoded so far (the position of the next token); in a ragged batch, the most
        steps of any row (the valid steps of the buffers)."""
        return self.layers[0].self_attn.length if self.layers else 0

    @property
    def positions(self) -> int | Tensor:
        """The position of each row's next token: ``length``, or (rows,) in a ragged batch."""
        return self.length if self.row_lengths is None else self.row_lengths

    @property
    def rows(self) -> int | None:
        """Rows held (None before the first call)."""
        return None if self.src_pad_mask is None else self.src_pad_mask.size(0)

    def start_call(self, rows: int, steps: int, enc: EncoderOut, dtype: torch.dtype) -> list[LayerStep]:
        """Check a call of ``rows`` x ``steps`` new tokens against ``enc`` and this cache; the per-layer
        caches for it (the first call keeps ``enc``'s pad mask)."""
        sources = enc.out.size(0)
        if rows != sources or (self.rows is not None and rows != self.rows):
            raise ValueError(
                f"decode of {rows} rows with a cache of {self.rows} rows and an encoder output of {sources}: "
                "reorder the cache and the encoder output with the same index"
            )
        self.keep_source(enc.pad_mask)
        bias = self.source_bias(dtype)
        if self.row_lengths is None:
            return [LayerStep(kv, bias) for kv in self.layers]
        at, extent = self.advance(steps)
        mask = mask_once(ragged_self_mask, at, extent, dtype)
        return [LayerStep(kv, bias, mask, at=at, extent=extent) for kv in self.layers]

    def advance(self, steps: int) -> tuple[Tensor, int]:
        """A ragged batch's call of ``steps`` (1) tokens a row: the step each row writes (rows,) and the
        valid steps after the call."""
        if steps != 1 or self.row_lengths is None:
            raise ValueError(f"a ragged batch decodes one token a row, got {steps}")
        at, self.row_lengths = self.row_lengths, self.row_lengths + 1
        return at, self.length + 1

    def add_sentences(self, source_keys: list[tuple[Tensor, Tensor]], pad_mask: Tensor) -> None:
        """Append one row for each new sentence, at step 0: ``source_keys`` (per layer, keys and values
        (n, Hkv, S', Dh), ``Decoder.source_keys``), ``pad_mask`` (n, S'). The cache must be in use."""
        if self.rows is None or self.src_pad_mask is None:
            raise ValueError("sentences join a cache after its first decode call")
        n = pad_mask.size(0)
        if self.row_lengths is None:
            self.row_lengths = torch.full((self.rows,), self.length, dtype=torch.long, device=pad_mask.device)
        self.row_lengths = torch.cat([self.row_lengths, self.row_lengths.new_zeros(n)])
        for layer, (k, v) in zip(self.layers, source_keys, strict=True):
            layer.add_rows(k, v)
        width = max(self.src_pad_mask.size(1), pad_mask.size(1))
        self.src_pad_mask = torch.cat([pad_mask_to(self.src_pad_mask, width), pad_mask_to(pad_mask, width)])
        self._source_bias = None

    def keep_source(self, pad_mask: Tensor) -> None:
        """Keep the source pad mask (B, S) on the first call."""
        if self.src_pad_mask is None:
            self.src_pad_mask = pad_mask

    def source_bias(self, dtype: torch.dtype) -> Tensor:
        """The encoder-decoder attention mask (rows, 1, 1, S): 0 for a source token, -inf for padding.
        Additive, so attention does not convert a bool mask in every layer at every step."""
        assert self.src_pad_mask is not None, "the first decode call sets the source pad mask"
        if self._source_bias is None or self._source_bias.dtype != dtype:
            self._source_bias = additive_mask(self.src_pad_mask, dtype)[:, None, None, :]
        return self._source_bias

    def reorder(self, index: Tensor) -> DecoderCache:
        """New row j continues old row ``index[j]`` (LongTensor (N',)), in place; returns ``self``."""
        check_index(index, self.rows, "cache")
        if self.rows is not None and not is_identity(index, self.rows):
            self.select_rows_(index)
        return self

    def select_rows_(self, index: Tensor) -> None:
        """Keep rows ``index`` of every buffer and of the source pad mask (no checks)."""
        if self.row_lengths is not None:  # the buffers keep the steps the longest row left holds
            self.row_lengths = self.row_lengths.index_select(0, index)
            longest = int(self.row_lengths.max()) if index.numel() else 0
            for layer in self.layers:
                layer.self_attn.length = min(layer.self_attn.length, longest)
        moves = row_moves(index, self.rows) if self.rows is not None else None  # once for every buffer
        if moves is not None and self.move_rows is not None:
            self.move_stores_(index.numel(), moves, self.move_rows)
        else:
            for layer in self.layers:
                layer.select_rows_(index, moves)
        if self.src_pad_mask is not None:
            left = index.numel() < self.src_pad_mask.size(0)
            self.src_pad_mask = self.src_pad_mask.index_select(0, index)
            self._source_bias = None
            if left:
                self.narrow_source()

    def move_stores_(self, rows: int, moves: RowMoves, move_rows: RowMover) -> None:
        """``LayerKV.select_rows_`` of every layer with ``moves``, as one call of ``move_rows``: the moved
        rows' valid steps (self-attention) and source steps, then every buffer keeps its first ``rows``."""
        stores, steps = [], []
        for layer in self.layers:
            buffer = layer.self_attn
            if buffer.keys is not None and buffer.values is not None:
                stores += [buffer.keys, buffer.values]
                steps += [buffer.length] * 2
            if layer.cross_k is not None and layer.cross_v is not None:
                stores += [layer.cross_k, layer.cross_v]
                steps += [layer.cross_k.size(2)] * 2
        if moves.to.numel():
            move_rows(stores, steps, moves.to, moves.source)
        for layer in self.layers:
            buffer = layer.self_attn
            if buffer.keys is not None and buffer.values is not None:
                buffer.keys, buffer.values = buffer.keys[:rows], buffer.values[:rows]
            if layer.cross_k is not None and layer.cross_v is not None:
                layer.cross_k, layer.cross_v = layer.cross_k[:rows], layer.cross_v[:rows]

    def narrow_source(self) -> None:
        """Drop the source steps that are padding in every row (rows with the longest sources left):
        encoder-decoder attention then reads fewer keys. Views, no copy."""
        assert self.src_pad_mask is not None
        used = (~self.src_pad_mask).any(dim=0).nonzero()  # (S'', 1) source steps some row reads
        steps = int(used.max()) + 1 if used.numel() else self.src_pad_mask.size(1)
        if steps < self.src_pad_mask.size(1):
            self.src_pad_mask = self.src_pad_mask[:, :steps]
            for layer in self.layers:
                layer.narrow_source(steps)


def check_index(index: Tensor, rows: int | None, what: str) -> None:
    """ValueError unless ``index`` is a 1-D integer tensor of rows in ``[0, rows)``."""
    if index.dim() != 1 or index.dtype not in (torch.int64, torch.int32):
        raise ValueError(f"reorder index must be a 1-D integer tensor, got {index.dtype} of shape {tuple(index.shape)}")
    if rows is not None and index.numel() and not (0 <= int(index.min()) and int(index.max()) < rows):
        raise ValueError(f"reorder index {index.tolist()} out of range for a {what} of {rows} rows")


def is_identity(index: Tensor, rows: int) -> bool:
    return index.numel() == rows and torch.equal(index, torch.arange(rows, device=index.device))


RowMover = Callable[[list[Tensor], list[int], Tensor, Tensor], None]  # (stores, steps, to, source): in place


class RowMoves(NamedTuple):
    """The rows a reorder moves: positions ``to`` (m,) of the new batch take old rows ``source`` (m,)."""

    to: Tensor
    source: Tensor


def row_moves(index: Tensor, rows: int) -> RowMoves | None:
    """The rows ``index`` (N',) moves in a batch of ``rows`` rows, when they are few (at most half):
    ``select_rows_`` then copies only those. None: ``index_select`` instead. A cache makes it once per
    reorder for all its buffers."""
    n = index.numel()
    if n > rows:
        return None
    to = (index != torch.arange(n, device=index.device)).nonzero().squeeze(1)  # (m,)
    return None if 2 * to.numel() > n else RowMoves(to, index[to])


def select_rows_(
    store: Tensor, index: Tensor, steps: int | None = None, moves: RowMoves | None | Literal[True] = True
) -> Tensor:
    """``store.index_select(0, index)``, but overwriting ``store`` in place when few rows move.

    When finished sentences leave a batch and the last ones move into their places
    (``mt.decode.common.fill_from_the_end``), ``index`` is ``0 .. N'-1`` but for a few entries: only
    those rows are copied, into ``store`` itself, and the result is the view ``store[:N']``; with
    ``steps``, only the first ``steps`` entries of dim 2 (the valid steps of a ``KVBuffer``) are copied.
    ``moves``: ``row_moves(index, store.size(0))`` if the caller made it (True: made here).
    ``store`` must not be used after this call except through the result. (Not under autograd:
    in-place writes into tensors that may be views of a graph's outputs are not allowed.)
    """
    if moves is True:
        moves = row_moves(index, store.size(0))
    if store.requires_grad or moves is None:
        return store.index_select(0, index)
    if moves.to.numel():
        valid = store if steps is None else store[:, :, :steps]
        valid[moves.to] = valid.index_select(0, moves.source)  # sources are read before any row is written
    return store[: index.numel()]


def append_rows(
    store: Tensor, new: Tensor | int, allocation: Tensor | None, valid_steps: int | None = None
) -> tuple[Tensor, Tensor]:
    """``store`` (rows, H, S, ...) with rows appended: ``new`` (n, H, S', ...) written into them, or ``new``
    rows left as they are. Returns (rows + n, H, max(S, S'), ...) and the allocation it is a view of.

    When ``store`` is the first rows and steps of ``allocation`` (rows that left, ``select_rows_``; a
    narrowed source, ``LayerKV.narrow_source``) and that has room, only the new rows' own steps are
    written. Else the allocation doubles, as zeros, and takes ``store``'s first ``valid_steps`` steps (all
    by default). Whatever a row holds beyond its own steps (zeros, or the stale keys of a row that left)
    is finite, and masked: the source pad mask, or a ragged batch's mask (``ragged_self_mask``)."""
    rows, n = store.size(0), new if isinstance(new, int) else new.size(0)
    width = store.size(2) if isinstance(new, int) else max(store.size(2), new.size(2))
    if (
        allocation is None
        or allocation.data_ptr() != store.data_ptr()
        or allocation.stride() != store.stride()
        or allocation.size(0) < rows + n
        or allocation.size(2) < width
    ):
        allocation = store.new_zeros(2 * (rows + n), store.size(1), width, *store.shape[3:])
        steps = store.size(2) if valid_steps is None else valid_steps
        allocation[:rows, :, :steps] = store[:, :, :steps]
    if not isinstance(new, int):
        allocation[rows : rows + n, :, : new.size(2)] = new
    return allocation[: rows + n, :, :width], allocation


def additive_mask(blocked: Tensor, dtype: torch.dtype) -> Tensor:
    """A bool mask as attention's additive one, in ``dtype``: 0 where allowed, -inf where ``blocked``."""
    return torch.zeros(blocked.shape, dtype=dtype, device=blocked.device).masked_fill_(blocked, float("-inf"))


def ragged_self_mask(at: Tensor, extent: int, dtype: torch.dtype) -> Tensor:
    """(rows, 1, 1, extent) additive: row r's one query sees steps ``0 .. at[r]`` (its own), -inf past them."""
    past = torch.arange(extent, device=at.device) > at.unsqueeze(1)  # (rows, L)
    return additive_mask(past, dtype)[:, None, None, :]


def mask_once(build: Callable[..., Tensor], *args) -> Callable[[], Tensor]:
    """``LayerStep.self_mask``: ``build(*args)`` on the first call, the same tensor after it."""
    return cache(partial(build, *args))


def pad_steps(t: Tensor, width: int, dim: int) -> Tensor:
    """``t`` with zeros appended along ``dim`` up to ``width`` entries."""
    missing = width - t.size(dim)
    if not missing:
        return t
    shape = list(t.shape)
    shape[dim] = missing
    return torch.cat([t, t.new_zeros(shape)], dim=dim)


def pad_mask_to(mask: Tensor, width: int) -> Tensor:
    """A pad mask (rows, S) widened to ``width`` with padding (True)."""
    return F.pad(mask, (0, width - mask.size(1)), value=True) if mask.size(1) < width else mask
