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
(``mt.model.attention.grouped_attention``) under a mask built from the table once per call, when the
Python step runs; the C++ step (``mt.model.native``) reads the table itself (``LayerStep.slots``). This
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
    mask_once,
    ragged_self_mask,
)


class BeamCache:
    """Beam search's decoding state over sentences x ``beams_per_sentence`` rows (see module doc)."""

    def __init__(self, n_layers: int, beams_per_sentence: int, move_rows: RowMover | None = None) -> None:
        if beams_per_sentence < 1:
            raise ValueError(f"beams_per_sentence must be >= 1, got {beams_per_sentence}")
        self.beams_per_sentence = beams_per_sentence
        self.store = DecoderCache(n_layers, move_rows)  # one row per sentence; slots of its buffers = beams
        self.beams: int | None = None  # decoder rows per sentence now (1 or K); None before the first call
        self.slots: Tensor | None = None  # (rows, >= steps) int32: the slot each row reads at each step (beams > 1)

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
        cache; give each row's new keys its own slot in the slot table; the per-layer caches for the call."""
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
        g = self.beams
        bias = self.store.source_bias(dtype)  # (sentences, 1, 1, S)
        if self.store.row_lengths is not None:  # sentences joined: each writes its own step
            at, extent = self.store.advance(steps)
            if g == 1:
                mask = mask_once(ragged_self_mask, at, extent, dtype)
                return [LayerStep(kv, bias, mask, 1, at, extent) for kv in self.store.layers]
            beam_at = at.repeat_interleave(g)  # (rows,) each beam at its sentence's step
            table = self._write_ragged_slots(beam_at, extent)
            mask = mask_once(self._ragged_slot_mask, table, beam_at, extent, dtype)
            return [LayerStep(kv, bias, mask, g, at, extent, table) for kv in self.store.layers]
        if g == 1:
            return [LayerStep(kv, bias) for kv in self.store.layers]
        table = self._append_slots(rows, steps, enc.pad_mask.device)
        mask = mask_once(self._slot_mask, table, steps, dtype)
        return [LayerStep(kv, bias, mask, g, slots=table) for kv in self.store.layers]

    def add_sentences(self, source_keys: list[tuple[Tensor, Tensor]], pad_mask: Tensor) -> None:
        """Append new sentences at step 0, K rows each (``DecoderCache.add_sentences``): their beams see
        nothing before their first step. Only after the first ``reorder`` (K rows a sentence)."""
        if self.beams != self.beams_per_sentence:
            raise ValueError("sentences join a beam cache once it holds K rows a sentence (after its first reorder)")
        self.store.add_sentences(source_keys, pad_mask)
        if self.slots is not None:  # their table rows are written step by step from their step 0 on
            joined = self.slots.new_zeros(pad_mask.size(0) * self.beams, self.slots.size(1))
            self.slots = torch.cat([self.slots, joined])

    def _own_slots(self, rows: int, device: torch.device) -> Tensor:
        """(rows,) int32: the slot each row writes, its place among its sentence's beams (row % g)."""
        assert self.beams is not None
        return torch.arange(rows, dtype=torch.int32, device=device) % self.beams

    def _reads(self, table: Tensor) -> Tensor:
        """table (rows, L) slots -> (rows, L, g) bool: True at the slot each row reads at each step."""
        assert self.beams is not None
        return table.unsqueeze(-1) == torch.arange(self.beams, dtype=table.dtype, device=table.device)

    def _append_slots(self, rows: int, steps: int, device: torch.device) -> Tensor:
        """Append this call's ``steps`` steps to the slot table, each row in its own slot; the table (rows, L)."""
        own = self._own_slots(rows, device).unsqueeze(1).expand(rows, steps)  # (rows, T)
        self.slots = own.contiguous() if self.slots is None else torch.cat([self.slots, own], dim=1)  # (rows, L)
        return self.slots

    def _write_ragged_slots(self, at: Tensor, extent: int) -> Tensor:
        """``_append_slots`` once sentences joined: row r's new key goes to its own slot at its sentence's
        step ``at[r]`` (rows,); the table (rows, >= extent)."""
        slots = self.slots
        assert slots is not None
        rows = at.numel()
        if slots.size(1) < extent:  # a new step: widen the table (wider than extent once the longest left: unread)
            slots = torch.cat([slots, slots.new_zeros(rows, extent - slots.size(1))], dim=1)
        slots[torch.arange(rows, device=at.device), at] = self._own_slots(rows, at.device)
        self.slots = slots
        return slots

    def _slot_mask(self, table: Tensor, steps: int, dtype: torch.dtype) -> Tensor:
        """The additive self-attention mask of a call of ``steps`` steps, (sentences, 1, g*T, L*g): row r's
        query at step t sees slot ``table[r, s]`` of each step s <= t."""
        g = self.beams
        assert g is not None
        rows, length = table.shape
        allowed = self._reads(table).unsqueeze(1)  # (rows, 1, L, g)
        if steps > 1:  # query i of the call sits at step length - T + i and sees steps up to it
            allowed = allowed & causal_mask(steps, length, table.device)[None, :, :, None]  # (rows, T, L, g)
        mask = additive_mask(~allowed, dtype)
        return mask.expand(rows, steps, length, g).reshape(rows // g, 1, g * steps, length * g)

    def _ragged_slot_mask(self, table: Tensor, at: Tensor, extent: int, dtype: torch.dtype) -> Tensor:
        """``_slot_mask`` once sentences joined: row r sees steps 0 .. at[r] (rows,) of ``table``.
        -> (sentences, 1, g, extent*g)."""
        g = self.beams
        assert g is not None
        rows = at.numel()
        allowed = self._reads(table[:, :extent])  # (rows, L, g)
        allowed = allowed & (torch.arange(extent, device=at.device) <= at.unsqueeze(1)).unsqueeze(-1)
        return additive_mask(~allowed, dtype).view(rows // g, 1, g, extent * g)

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
        if k > 1:  # each new row reads what its ancestor read
            self.slots = (
                self.slots.index_select(0, index)
                if self.slots is not None
                else torch.zeros(index.numel(), self.length, dtype=torch.int32, device=index.device)
            )
        self.beams = k
        return self
