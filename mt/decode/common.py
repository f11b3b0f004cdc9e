"""What every search strategy shares: the result type, the model protocol, length limits, masking.

Conventions (docs/ARCHITECTURE.md): the source is ``pieces + [EOS]`` padded with PAD; decoding starts
from ``[BOS]`` and stops at ``EOS``. B sentences, K beams, V target vocabulary.

Maximum output length: ``max_len = floor(a * |src| + b)`` pieces, where ``|src|`` is the number of
source pieces *without* its EOS and ``a, b = max_len_a, max_len_b`` (``DecodeConfig``); it is at least
1 and at most ``max_positions - 1`` (the decoder input ``[BOS] + pieces`` must fit the model's
positions). A hypothesis holds at most ``max_len`` pieces: at step ``max_len`` only EOS is allowed.
Minimum: EOS is banned before ``min_len`` pieces (default 1: a non-empty source never gets an empty
output), never past ``max_len``.

A forced first token (``forced[i]``, per sentence; M2M-100 and NLLB's target language code): the sentence's
first step may only produce that id, scored 0 (log-prob 0, as transformers' ``forced_bos_token_id``); it counts
in the length penalty's |Y| and is decoded on top of ``max_len`` and ``min_len`` (``forced_limits``), but is left
out of the hypothesis (its ``tokens`` are the pieces after it). The C++ searches do not take it: a batch with one
decodes in Python.

Scores: log-probs are taken in float32 (``log_softmax`` of the float32 logits); PAD, BOS and the
embedding's padding ids (``>= vocab_size`` when the search is given the tokenizer's size) are never
generated (their log-probs are set to -inf *after* the softmax, without renormalising, so a reported
log-prob is the model's own); UNK is allowed.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Protocol

import torch
import torch.nn.functional as F
from torch import Tensor

from mt.data.tokenizer import BOS_ID, EOS_ID, PAD_ID

NEG_INF = -math.inf


@dataclass
class Hypothesis:
    """One output: ``tokens`` (pieces, no BOS, no EOS), ``score`` (length-penalised), ``logprob`` (sum)."""

    tokens: list[int]
    score: float
    logprob: float


class Reorderable(Protocol):
    def reorder(self, index: Tensor) -> object: ...


class DecodableModel(Protocol):
    """The part of ``Seq2SeqTransformer`` that search uses (a scripted test model implements it too)."""

    def encode(self, src: Tensor, src_pad_mask: Tensor) -> Reorderable: ...

    def new_cache(self, beams_per_sentence: int | None = None) -> Reorderable:
        """A plain cache (None: one source row per decoder row) or beam search's (``BeamCache``)."""
        ...

    def decode(self, tgt_in: Tensor, enc: Reorderable, cache: Reorderable | None = None) -> Tensor: ...

    def join(self, enc: Reorderable, cache: Reorderable, new: Reorderable) -> None:
        """Add sentences, ``new`` from ``encode``, to a decoding in progress (continuous batching,
        ``mt.decode.refill``)."""
        ...


def source_lengths(src_pad_mask: Tensor) -> Tensor:
    """Source pieces per sentence, EOS excluded: (B, S) bool -> (B,) long."""
    return (~src_pad_mask).sum(dim=1) - 1


def max_output_lengths(
    src_pad_mask: Tensor, max_len_a: float, max_len_b: int, max_positions: int | None = None
) -> list[int]:
    """``floor(a * |src| + b)`` per sentence, clamped to ``[1, max_positions - 1]`` (see module doc)."""
    limits = []
    for n in source_lengths(src_pad_mask).tolist():
        limit = max(1, math.floor(max_len_a * n + max_len_b))
        if max_positions is not None:
            limit = min(limit, max_positions - 1)
        limits.append(limit)
    return limits


def min_output_lengths(min_len: int, max_len: list[int]) -> list[int]:
    """Pieces before EOS is allowed, per sentence: ``min_len`` (``DecodeConfig.min_len``), but never past
    the sentence's ``max_len`` (where only EOS is allowed)."""
    if min_len < 0:
        raise ValueError(f"decode.min_len must be >= 0, got {min_len}")
    return [min(min_len, limit) for limit in max_len]


def forced_limits(
    max_len: list[int], min_len: list[int], forced: Sequence[int | None] | None, max_positions: int | None = None
) -> tuple[list[int], list[int]]:
    """``max_len`` and ``min_len`` one longer for the sentences with a forced first token (``forced[i]`` not None):
    it is decoded first, then as many pieces as any sentence may have (the decoder input still fits
    ``max_positions``)."""
    if forced is None:
        return max_len, min_len
    longer = [limit if first is None else limit + 1 for limit, first in zip(max_len, forced, strict=True)]
    if max_positions is not None:
        longer = [min(limit, max_positions - 1) for limit in longer]
    shortest = [min(n + (first is not None), limit) for n, first, limit in zip(min_len, forced, longer, strict=True)]
    return longer, shortest


def forced_ids(forced: Sequence[int | None] | None, sentences: Sequence[int]) -> list[int]:
    """The forced first token of each of ``sentences``, -1 for none (the C++ searches' form)."""
    return [-1 if forced is None or forced[s] is None else forced[s] for s in sentences]


def forced_tokens(forced: Sequence[int | None] | None, sentences: Sequence[int], device: torch.device) -> Tensor:
    """The forced first token of each of ``sentences`` (n,) long, -1 for none (``force_first_``)."""
    return torch.tensor(forced_ids(forced, sentences), dtype=torch.long, device=device)


def force_first_(scores: Tensor, tokens: Tensor) -> Tensor:
    """In place: a row of ``scores`` (N, V) whose ``tokens`` (N,) entry is an id (not -1) may only produce that id,
    scored 0 (a forced first token, see the module doc); the other rows are left as they are."""
    rows = (tokens >= 0).nonzero().squeeze(1)  # (n,)
    scores[rows] = NEG_INF
    scores[rows, tokens[rows]] = 0.0
    return scores


def rows_below(steps: list[int], limits: list[int], rows: int, device: torch.device) -> Tensor | None:
    """(B' * rows,) bool: the rows of sentences whose ``limits`` entry is above their ``steps`` entry
    (each sentence owning ``rows`` consecutive rows), or None when there is none."""
    below = [step < limit for step, limit in zip(steps, limits, strict=True)]
    if not any(below):
        return None
    return torch.tensor(below, device=device).repeat_interleave(rows)


def ban_(scores: Tensor, vocab_size: int | None = None) -> Tensor:
    """In place: PAD, BOS and ids at or past ``vocab_size`` (the embedding's rounding to a multiple of
    8) get -inf in ``scores`` (N, V), which may be logits or log-probs."""
    scores[:, PAD_ID] = NEG_INF
    scores[:, BOS_ID] = NEG_INF
    if vocab_size is not None:
        scores[:, vocab_size:] = NEG_INF
    return scores


def log_probs(logits: Tensor, vocab_size: int | None = None) -> Tensor:
    """Next-token log-probs in float32 with PAD/BOS (and ids ``>= vocab_size``) banned: logits (N, 1, V) -> (N, V)."""
    # the very call beam search makes (so beam 1 == greedy, bit for bit)
    return ban_(F.log_softmax(logits[:, -1, :].float(), dim=-1), vocab_size)  # (N, V)


def chunk_size(vocab: int, k: int) -> int:
    """The chunk of ids ``topk_rows`` and ``argmax_rows`` cut a row into: 64, 32 or 16, dividing ``vocab``
    into more than ``k`` chunks; 0 when none does (they then take the whole row)."""
    return next((c for c in (64, 32, 16) if vocab % c == 0 and vocab // c > k), 0)


def topk_rows(scores: Tensor, k: int) -> tuple[Tensor, Tensor]:
    """The ``k`` largest entries of each row of ``scores`` (N, V), best first: (values, ids), each (N, k).

    Exact, and faster than ``scores.topk(k)`` over a whole vocabulary (about 2x for V = 8000): each row
    is cut into chunks of C ids, the k chunks with the largest maxima are kept (they hold a top k: a
    chunk holding one of the k largest values has a maximum at least as large as the k-th), and the
    top k is taken among their k * C entries. Ties may be broken differently from ``topk``.
    """
    n, vocab = scores.shape
    chunk = chunk_size(vocab, k)
    if not chunk:
        return scores.topk(k, dim=1)
    chunks = scores.view(n, vocab // chunk, chunk)  # (N, V/C, C)
    best_chunks = chunks.amax(dim=2).topk(k, dim=1).indices  # (N, k)
    entries = chunks.gather(1, best_chunks.unsqueeze(2).expand(n, k, chunk)).view(n, k * chunk)  # (N, k*C)
    values, pos = entries.topk(k, dim=1)  # (N, k)
    return values, best_chunks.gather(1, pos // chunk) * chunk + pos % chunk


def argmax_rows(scores: Tensor) -> Tensor:
    """``scores.argmax(dim=1)`` of scores (N, V) -> (N,): the first of equal maxima (NaN counts as largest).

    Bit for bit ``argmax``'s answer, and faster over a whole vocabulary (a (64, 8000) float32 tensor, 2 threads,
    5 alternated rounds: 404 us for torch 2.13's CPU ``argmax``, 122 us for this): the first chunk of C ids
    whose maximum is the row's maximum holds the row's first maximum, which is the first maximum of that chunk.
    """
    n, vocab = scores.shape
    chunk = chunk_size(vocab, 1)
    if not chunk or n == 0:
        return scores.argmax(dim=1)
    chunks = scores.view(n, vocab // chunk, chunk)  # (N, V/C, C)
    best_chunk = chunks.amax(dim=2).argmax(dim=1)  # (N,)
    within = chunks[torch.arange(n, device=scores.device), best_chunk].argmax(dim=1)  # (N,)
    return best_chunk * chunk + within


def force_eos_(lprobs: Tensor, rows: Tensor) -> Tensor:
    """In place: rows where ``rows`` (N,) bool is True may only produce EOS (its log-prob is kept)."""
    eos = lprobs[:, EOS_ID].clone()  # (N,)
    lprobs.masked_fill_(rows.unsqueeze(1), NEG_INF)
    lprobs[:, EOS_ID] = eos
    return lprobs


def ban_eos_(lprobs: Tensor, rows: Tensor) -> Tensor:
    """In place: rows where ``rows`` (N,) bool is True may not produce EOS (not yet ``min_len`` pieces)."""
    lprobs[:, EOS_ID].masked_fill_(rows, NEG_INF)
    return lprobs


def fill_from_the_end(done: list[bool]) -> list[int]:
    """The rows (sentences) to keep when those marked ``done`` leave a batch, in an order that moves
    few: each finished one's place is taken by the last unfinished one behind it (e.g. done =
    [F, T, F, F, T, F] -> [0, 5, 2, 3]), so the cache copies only the moved ones
    (``mt.model.cache.select_rows_``) instead of every one after a gap."""
    kept = [i for i, d in enumerate(done) if not d]
    movers = iter(i for i in reversed(kept) if i >= len(kept))
    return [i if i < len(kept) and not done[i] else next(movers) for i in range(len(kept))]


def start_tokens(n: int, device: torch.device) -> Tensor:
    """The decoder's first input, ``[BOS]`` per row: (n, 1) long."""
    return torch.full((n, 1), BOS_ID, dtype=torch.long, device=device)


__all__ = [
    "BOS_ID",
    "EOS_ID",
    "NEG_INF",
    "PAD_ID",
    "DecodableModel",
    "Hypothesis",
    "Reorderable",
    "argmax_rows",
    "ban_",
    "ban_eos_",
    "fill_from_the_end",
    "force_eos_",
    "force_first_",
    "forced_limits",
    "forced_tokens",
    "log_probs",
    "max_output_lengths",
    "min_output_lengths",
    "rows_below",
    "source_lengths",
    "start_tokens",
    "topk_rows",
]
