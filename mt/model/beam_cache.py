"""The decoding state of beam search: the beams of a sentence share one store.

``BeamCache(n_layers, beams_per_sentence=K)`` keeps the ``DecoderCache`` contract (``decode`` feeds
new tokens, ``reorder(index)``: new row j continues old row ``index[j]``) for rows laid out as
sentences x beams (row ``s * K + k`` is beam k of sentence s), with two differences:

- ``enc`` holds one row per *sentence*: beam search reorders it only when sentences leave the batch.
- The first call has one row per sentence (beam search's step 0: the K beams would be copies) or K;
  after it, every ``reorder`` gives K rows per sentence, and the K new rows of a sentence must continue
  rows of one old sentence (its beams). Anything else raises ValueError.

Why: the beams of a sentence attend to the same source and mostly to the same history. So ``store``
is a ``DecoderCache`` with one row per sentence: the source K/V are computed once per sentence, and
its self-attention buffers hold K slots, one per beam. Every step each beam writes its own slot, and
the slot table ``slots`` (rows, length) records which slot each row reads at each step (its
ancestor's), so beams that swap or repeat within a sentence rewrite only that small table (no stored
key moves), and finished sentences are replaced by the last ones, so only those rows are copied
(``select_rows_``). The K beams' queries then attend to their sentence's keys together
(``mt.model.attention.grouped_attention``) under a mask built from the table once per call. This
sharing was measured at about 10-15% of beam-4 decoding speed against copying every beam's history
every step.
"""

from __future__ import annotations

import torch
from torch import Tensor

from mt.model.attention import causal_mask
from mt.model.cache import (
    DecoderCache,
    EncoderOut,
    LayerStep,
    RowMover,
    additive_mask,
    check_index,
    is_identity,
    ragged_mask,
)


class BeamCache:
    """Beam search's decoding state over sentences x ``beams_per_sentence`` rows (see module doc)."""

    def __init__(self, n_layers: int, beams_per_sentence: int, move_rows: RowMover | None = None) -> None:
        if beams_per_sentence < 1:
            raise ValueError(f"beams_per_sentence must be >= 1, got {beams_per_sentence}")
        self.beams_per_sentence = beams_per_sentence
        self.store = DecoderCache(n_layers, move_rows)  # one row per sentence; slots of its buffers = beams
        self.beams: int | None = None  # decoder rows per sentence now (1 or K); None before the first call
        self.slots: Tensor | None = None  # (rows, length) the slot each row reads at each step (beams > 1)
        self.seen: Tensor | None = None  # (rows, length * beams) the additive mask row of each row's last step
        self._own: Tensor | None = None  # (rows, beams) the mask block of one new step (``_own_slot``)
        self.dtype = torch.float32  # the masks' dtype: the last call's

    @property
    def length(self) -> int:
        """Target steps decoded so far (the position of the next token)."""
        return self.store.length

    @property
    def positions(self) -> int | Tensor:
        """The position of each row's next token: ``length``, or (rows,) once sentences joined."""
        lengths = self.store.row_lengths
        return self.length if lengths is None else lengths.repeat_interleave(self.beams or 1)

    @property
    def sentences(self) -> int | None:
        return self.store.rows

    @property
    def rows(self) -> int | None:
        """Decoder rows held: sentences x beams (None before the first call)."""
        return None if self.store.rows is None or self.beams is None else self.store.rows * self.beams

    def start_call(self, rows: int, steps: int, enc: EncoderOut, dtype: torch.dtype) -> list[LayerStep]:
        """Check a call of ``rows`` x ``steps`` new tokens against ``enc`` (one row per sentence) and this
        cache; extend the slot table; the per-layer caches for the call."""
        k, sentences = self.beams_per_sentence, enc.out.size(0)
        if self.beams is None:
            if sentences == 0 or rows not in (sentences, sentences * k):
                raise ValueError(
                    f"the first decode with a beam cache needs 1 or {k} rows per sentence: "
                    f"{rows} rows for {sentences} sentences"
                )
            self.beams = rows // sentences
        elif sentences != self.sentences or rows != self.rows:
            raise ValueError(
                f"decode of {rows} rows with an encoder output of {sentences} sentences; the beam cache holds "
                f"{self.sentences} sentences x {self.beams} beams (reorder the encoder output by sentence)"
            )
        self.store.keep_source(enc.pad_mask)
        self.dtype = dtype
        bias = self.store.source_bias(dtype)  # (sentences, 1, 1, S)
        if self.store.row_lengths is not None:  # sentences joined: each writes its own step
            at, extent = self.store.advance(steps)
            mask = self._ragged_slot_mask(at, extent, dtype)
            return [LayerStep(kv, bias, mask, self.beams, at, extent) for kv in self.store.layers]
        mask = self._slot_mask(rows, steps, dtype, enc.pad_mask.device) if self.beams > 1 else None
        return [LayerStep(kv, bias, mask, self.beams) for kv in self.store.layers]

    def add_sentences(self, source_keys: list[tuple[Tensor, Tensor]], pad_mask: Tensor) -> None:
        """Append new sentences at step 0, K rows each (``DecoderCache.add_sentences``): their beams see
        nothing before their first step. Only after the first ``reorder`` (K rows a sentence)."""
        if self.beams != self.beams_per_sentence:
            raise ValueError("sentences join a beam cache once it holds K rows a sentence (after its first reorder)")
        self.store.add_sentences(source_keys, pad_mask)
        if self.beams > 1:
            if self.seen is None:  # right after step 0's fan-out: the mask rows from the slot table
                self.seen = self._seen_from_slots()
            blocked = self.seen.new_full((pad_mask.size(0) * self.beams, self.seen.size(1)), float("-inf"))
            self.seen = torch.cat([self.seen, blocked])
        self.slots = None  # rows at different steps: ``seen`` alone holds what each row reads

    def _seen_from_slots(self) -> Tensor:
        """``seen`` (rows, L*g) as ``_slot_mask`` builds it, from the slot table, in the last call's dtype."""
        assert self.slots is not None and self.beams is not None
        allowed = self.slots.unsqueeze(-1) == torch.arange(self.beams, device=self.slots.device)  # (rows, L, g)
        return additive_mask(~allowed, self.dtype).flatten(1)

    def _ragged_slot_mask(self, at: Tensor, extent: int, dtype: torch.dtype) -> Tensor | None:
        """``_slot_mask`` once sentences joined: each row's new key goes to its own slot at its
        sentence's step ``at`` (sentences,), instead of after the last step."""
        g = self.beams
        assert g is not None
        if g == 1:
            return ragged_mask(at, extent, dtype)[:, None, None, :]  # (sentences, 1, 1, L)
        if self.seen is None or self.seen.dtype != dtype:
            raise ValueError("a beam cache with sentences at different steps decodes in one dtype")
        rows = at.numel() * g
        seen = self.seen.view(rows, -1, g)  # (rows, L', g)
        if seen.size(1) > extent:  # the longest sentences left
            seen = seen[:, :extent].contiguous()
        elif seen.size(1) < extent:
            seen = torch.cat([seen, seen.new_full((rows, extent - seen.size(1), g), float("-inf"))], dim=1)
        seen[torch.arange(rows, device=at.device), at.repeat_interleave(g)] = self._own_slot(rows, dtype, at.device)
        self.seen = seen.view(rows, extent * g)
        return self.seen.view(rows // g, 1, g, extent * g)

    def _slot_mask(self, rows: int, steps: int, dtype: torch.dtype, device: torch.device) -> Tensor:
        """Give each row's new keys its own slot; the additive self-attention mask of the call,
        (sentences, 1, g*T, L*g): row r's query at step t sees slot ``slots[r, s]`` of each step s <= t.

        One step at a time (T = 1, every step of beam search) the mask is kept, not rebuilt: ``seen``
        (rows, L*g) holds row r's mask row, and a step appends one (g,) block (0 at the row's own slot)
        and a reorder selects rows, the same values as building it from ``slots``.
        """
        g = self.beams
        assert g is not None
        own = (torch.arange(rows, device=device) % g).unsqueeze(1).expand(rows, steps)  # (rows, T)
        self.slots = own if self.slots is None else torch.cat([self.slots, own], dim=1)  # (rows, L)
        length = self.slots.size(1)
        if steps == 1 and self.seen is not None and self.seen.dtype == dtype:
            self.seen = torch.cat([self.seen, self._own_slot(rows, dtype, device)], dim=1)  # (rows, L*g)
            return self.seen.view(rows // g, 1, g, length * g)
        allowed = self.slots.unsqueeze(-1) == torch.arange(g, device=device)  # (rows, L, g)
        allowed = allowed.unsqueeze(1)  # (rows, 1, L, g)
        if steps > 1:  # query i of the call sits at step length - T + i and sees steps up to it
            allowed = allowed & causal_mask(steps, length, device)[None, :, :, None]  # (rows, T, L, g)
        mask = additive_mask(~allowed, dtype)
        self.seen = mask[:, -1].reshape(rows, length * g)  # the last step's row: what the next step extends
        return mask.expand(rows, steps, length, g).reshape(rows // g, 1, g * steps, length * g)

    def _own_slot(self, rows: int, dtype: torch.dtype, device: torch.device) -> Tensor:
        """(rows, g) additive: 0 at each row's own slot (row % g), -inf elsewhere; made once per shape."""
        if self._own is None or self._own.shape[0] != rows or self._own.dtype != dtype:
            g = self.beams
            assert g is not None
            own = (torch.arange(rows, device=device) % g).unsqueeze(1) == torch.arange(g, device=device)
            self._own = additive_mask(~own, dtype)
        return self._own

    def reorder(self, index: Tensor) -> BeamCache:
        """New row j continues old row ``index[j]`` (LongTensor (sentences' x K,)), in place; the K new
        rows of a sentence must continue beams of one old sentence. Returns ``self``."""
        if self.beams is None:
            raise ValueError("a beam cache can be reordered only after the first decode call")
        check_index(index, self.rows, "beam cache")
        k = self.beams_per_sentence
        if index.numel() % k:
            raise ValueError(f"reorder index of {index.numel()} rows is not sentences x {k} beams")
        sources = index.view(-1, k) // self.beams  # (sentences', K) the old sentence of each new row
        kept = sources[:, 0]
        if not bool((sources == kept.unsqueeze(1)).all()):
            raise ValueError(
                f"reorder index {index.tolist()}: the {k} rows of each sentence must continue beams of one "
                "sentence (a beam cache cannot mix sentences; use a plain DecoderCache)"
            )
        if not is_identity(kept, self.store.rows or 0):  # sentences left: move as few as possible
            self.store.select_rows_(kept)
        if self.beams < k:  # one row per sentence fans out to K beams
            for layer in self.store.layers:
                layer.self_attn.widen(k)
        if k > 1 and self.store.row_lengths is not None:  # ragged: the mask rows are the whole state
            assert self.seen is not None
            self.seen = self.seen.index_select(0, index)
        elif k > 1:
            old = self.slots
            self.slots = (
                old.index_select(0, index)
                if old is not None
                else torch.zeros(index.numel(), self.length, dtype=torch.long, device=index.device)
            )
            self.seen = None if self.seen is None or old is None else self.seen.index_select(0, index)
        self.beams = k
        return self
