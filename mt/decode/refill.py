"""Continuous batching: sentences join a decoding in progress as others finish.

A batch decoded to its end spends its last steps on a few long sentences, each step paying the whole
per-step overhead for little work. Instead, the search takes its sentences from a ``SentenceQueue`` (in
the caller's order): whenever at least a quarter of the places are free, the next sentences join the
batch (``Seq2SeqTransformer.join``) at their own step 0, beside sentences that are further on (the cache
keeps each row's own step, ``mt.model.cache``). Sentences are encoded a batch at a time
(``SentenceQueue.encoded``), not a join at a time. A sentence's output does not depend on which others
it is decoded with.

``live[i]``: the most sentences decoded together once sentence i is taken (the size of the token-budget
batch it would have been in), so the budget of the caller's batching still holds.

Measured on transformer_mini, Multi30k test2016, batches of 64 (docs/benchmarks.md): greedy takes about
half the decoder steps of whole batches, for the same row-steps (the translator hands a pool over longest
sentence first, which cuts the last steps further). Beam 4 takes 300 steps instead of 416, but a joining
sentence decodes its K beams from step 0 (a batch's first step decodes one row a sentence) and rows at
different steps attend over more (masked) keys: more work per step, and no faster. So ``decode.refill``
defaults to greedy only.
"""

from __future__ import annotations

import copy
from collections.abc import Callable
from typing import Protocol, TypeVar

import torch
from torch import Tensor

from mt.decode.common import BOS_ID, NEG_INF, PAD_ID, Hypothesis, Reorderable

# hears (sentence, its final n-best list) for sentences as soon as they are done, a group at a time
SentencesDone = Callable[[list[tuple[int, list[Hypothesis]]]], None]

REFILL_FRACTION = 4  # sentences join once 1/4 of the places are free: fewer, larger joins


class EncodedRows(Reorderable, Protocol):
    """An encoder output as ``Seq2SeqTransformer.encode`` makes it (``mt.model.EncoderOut``): rows that
    reorder, and that other rows extend."""

    def extend(self, other: EncodedRows) -> object: ...


Encoded = TypeVar("Encoded", bound=EncodedRows)


class SentenceQueue:
    """The sentences of src (N, S) waiting to be decoded, in order; ``live`` as in the module doc
    (None: all of them at once, no refill)."""

    def __init__(self, src: Tensor, src_pad_mask: Tensor, live: list[int] | None = None) -> None:
        if live is not None and (len(live) != src.size(0) or min(live, default=1) < 1):
            raise ValueError(f"live needs one entry >= 1 per sentence, got {len(live)} for {src.size(0)}")
        self.src, self.src_pad_mask = src, src_pad_mask
        self.live = live if live is not None else [src.size(0)] * src.size(0)
        self.next = 0
        self._chunks: list[tuple[int, int, EncodedRows]] = []  # (first, end, encoder output), not all taken
        self._encoded_end = 0  # sentences before it are encoded

    def __bool__(self) -> bool:
        return self.next < len(self.live)

    def wants(self, decoding: int) -> bool:
        """Whether sentences should join ``decoding`` ones now (enough free places for a join)."""
        if not self:
            return False
        places = self.live[self.next]
        return places - decoding >= max(1, places // REFILL_FRACTION)

    def take(self, decoding: int) -> list[int]:
        """The next sentences that fit beside ``decoding`` ones (at least one when none is decoding)."""
        taken: list[int] = []
        while self and (decoding + len(taken) < self.live[self.next] or not decoding + len(taken)):
            taken.append(self.next)
            self.next += 1
        return taken

    def encoded(self, encode: Callable[[Tensor, Tensor], Encoded], sentences: list[int]) -> Encoded:
        """The encoder output of ``sentences`` (consecutive ones, as ``take`` gives them), one row each.

        Sentences are encoded a batch at a time, once: from the first one not encoded yet, the next
        ``live[i]`` (the batch it would have been in). A join of a few sentences then reuses what one
        larger encode made (fewer calls, each sentence encoded beside the same ones as without refill)."""
        first, end = sentences[0], sentences[-1] + 1
        while self._encoded_end < end:
            start = self._encoded_end
            stop = min(len(self.live), start + self.live[start])
            self._chunks.append((start, stop, encode(*self.sources(list(range(start, stop))))))
            self._encoded_end = stop
        parts: list[Encoded] = []
        for start, stop, chunk in self._chunks:
            lo, hi = max(first, start), min(end, stop)
            if lo < hi:  # a copy keeps the chunk as it is: reorder and extend replace, never write, tensors
                part = copy.copy(chunk)
                if (lo, hi) != (start, stop):
                    part.reorder(torch.arange(lo - start, hi - start, device=self.src.device))
                parts.append(part)  # type: ignore[arg-type]
        self._chunks = [c for c in self._chunks if c[1] > end]  # a chunk whose sentences are all taken goes
        for part in parts[1:]:
            parts[0].extend(part)
        return parts[0]

    def sources(self, sentences: list[int]) -> tuple[Tensor, Tensor]:
        """src (n, S'), src_pad_mask (n, S') of ``sentences``, cut to their longest source."""
        index = torch.tensor(sentences, device=self.src.device)
        mask = self.src_pad_mask.index_select(0, index)
        width = int((~mask).sum(dim=1).max())
        return self.src.index_select(0, index)[:, :width], mask[:, :width]


def joining_tokens(rows: int, width: int, device: torch.device) -> Tensor:
    """Token history rows (rows, width) for sentences joining now: BOS in the last column (the input of
    their first step), PAD before it (never read)."""
    tokens = torch.full((rows, width), PAD_ID, dtype=torch.long, device=device)
    tokens[:, -1] = BOS_ID
    return tokens


def first_beam_only(sentences: int, beam: int, device: torch.device) -> Tensor:
    """Cumulative scores (n, K) for joining sentences: their K beams are the same ``[BOS]``, so only
    the first one may extend (the others' candidates are -inf), as step 0 of a batch does by decoding
    one row a sentence."""
    scores = torch.full((sentences, beam), NEG_INF, device=device)
    scores[:, 0] = 0.0
    return scores
