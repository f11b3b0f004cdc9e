"""Greedy decoding: the single best next token at every step, batched, with the KV cache.

``decode_single_path`` is the loop shared with sampling (``mt.decode.sampling``): one hypothesis per
sentence, a ``choose`` function picks each next token, and sentences that produced EOS leave the
batch (cache and encoder output reordered to drop them). Output length limits (``min_len`` too),
scores and masking as in ``mt.decode.common``; the score is ``logprob / lp(|Y|)`` as in beam search.
Beam search with ``beam_size = 1`` is exactly greedy search under ``stopping=topk_eos``, or without a
length penalty; under ``exact`` with a penalty it may keep the runner-up alive past greedy's EOS and
return a better-scoring output (``mt.decode.stopping``).
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import torch
from torch import Tensor

from mt.config import DecodeConfig
from mt.decode.common import (
    BOS_ID,
    EOS_ID,
    PAD_ID,
    DecodableModel,
    Hypothesis,
    argmax_rows,
    ban_,
    ban_eos_,
    fill_from_the_end,
    force_eos_,
    force_first_,
    forced_ids,
    forced_limits,
    forced_tokens,
    log_probs,
    max_output_lengths,
    min_output_lengths,
    start_tokens,
)
from mt.decode.length_penalty import check_penalty, length_penalty
from mt.decode.refill import EncodedRows, SentenceQueue, SentencesDone, joining_tokens

# (B', V) float32 log-probs -> (B',) chosen token ids
Chooser = Callable[[Tensor], Tensor]


def decode_single_path(
    model: DecodableModel,
    src: Tensor,
    src_pad_mask: Tensor,
    choose: Chooser,
    *,
    max_len: list[int],
    min_len: list[int],
    penalty: str,
    alpha: float,
    vocab_size: int | None = None,
    live: list[int] | None = None,
    on_done: SentencesDone | None = None,
    scores: bool = True,
    native: bool = False,
    forced: Sequence[int | None] | None = None,
) -> list[list[Hypothesis]]:
    """One hypothesis per sentence of src (B, S), each next token picked by ``choose``.

    ``max_len``, ``min_len``: pieces per sentence at most, and before EOS is allowed; ``penalty``,
    ``alpha``: the length penalty of the score; ids ``>= vocab_size`` are never generated; ``live``:
    continuous batching (``mt.decode.refill``); ``on_done`` hears sentences as soon as they end.
    ``scores=False`` (a ``choose`` that picks the largest entry): ``choose`` sees the logits instead of the
    log-probs, so no step computes a log-softmax over the vocabulary (CTranslate2 does the same without
    ``return_scores``); the largest entry is the same, as the log-softmax subtracts one constant from a
    row, unless float32 rounding makes the two largest log-probs equal. Scores and logprobs are NaN.
    ``native`` (``choose`` picking the first largest entry): a model with a C++ greedy loop
    (``Seq2SeqTransformer.native_greedy``) decodes each batch (``live[i]`` sentences) whole in it, no refill:
    the same tokens, every step without Python. ``forced``: each sentence's forced first token or None
    (``mt.decode.common``; ``max_len`` and ``min_len`` count it, as ``forced_limits`` makes them).
    """
    results: list[list[Hypothesis]] = [[] for _ in range(src.size(0))]
    limits = _Limits(max_len, min_len, penalty, alpha, scores, forced)
    queue = SentenceQueue(src, src_pad_mask, live)
    while queue:
        sentences = queue.take(0)
        enc = queue.encoded(model.encode, sentences)
        if native and _decode_native(model, enc, sentences, results, limits, vocab_size, on_done):
            continue
        _decode_rows(model, queue, sentences, enc, choose, results, limits, vocab_size, on_done)
    return results


def _decode_native(
    model: DecodableModel, enc: EncodedRows, sentences: list[int], results: list[list[Hypothesis]],
    limits: _Limits, vocab_size: int | None, on_done: SentencesDone | None,
) -> bool:
    """Decode ``sentences`` (encoded as ``enc``) whole with the model's C++ greedy loop; False (nothing done)
    where the model has none or it does not take them."""
    search = getattr(model, "native_greedy", None)
    if search is None:
        return False
    found = search(
        enc, [limits.max_len[s] for s in sentences], [limits.min_len[s] for s in sentences], vocab_size,
        (PAD_ID, BOS_ID, EOS_ID), limits.scores, forced_ids(limits.forced, sentences),
    )
    if found is None:
        return False
    done = [
        (sent, [limits.hypothesis(sent, pieces, logprob)])
        for sent, pieces, logprob in zip(sentences, *found, strict=True)
    ]
    for sent, hyps in done:
        results[sent] = hyps
    if on_done is not None:
        on_done(done)
    return True


@dataclass
class _Limits:
    """Per sentence: pieces at most, pieces before EOS is allowed, the forced first token (or None); the length
    penalty of the score."""

    max_len: list[int]
    min_len: list[int]
    penalty: str
    alpha: float
    scores: bool = True  # False: no log-probs, NaN scores (``decode_single_path``)
    forced: Sequence[int | None] | None = None

    def forces(self, sentences: list[int]) -> bool:
        """Whether one of ``sentences`` has a forced first token."""
        return self.forced is not None and any(self.forced[s] is not None for s in sentences)

    def hypothesis(self, sent: int, tokens: list[int], logprob: float) -> Hypothesis:
        """``sent``'s output ``tokens`` (its forced first token, if any, first: counted in |Y|, then left out)."""
        pieces = tokens[1:] if self.forces([sent]) else tokens
        if not self.scores:
            return Hypothesis(pieces, math.nan, math.nan)
        return Hypothesis(pieces, logprob / length_penalty(len(tokens) + 1, self.penalty, self.alpha), logprob)


@dataclass
class _Rows:
    """The rows being decoded, one per sentence; steps are the batch's (sentences join at later steps)."""

    sentence: Tensor  # (B',) the sentence of each row
    born: Tensor  # (B',) the step of its first token (BOS)
    limit: Tensor  # (B',) the step from which it may only end: born + max_len
    shortest: Tensor  # (B',) the step before which it may not end: born + min_len
    tokens: Tensor  # (B', t + 1) its tokens, column j holding step ``origin + j``'s input
    logprob: Tensor  # (B',)
    forced: Tensor  # (B',) its forced first token, -1 for none
    origin: int = 0

    @classmethod
    def starting(cls, sentences: list[int], step: int, limits: _Limits, device: torch.device) -> _Rows:
        """Rows for ``sentences`` whose BOS is the input of ``step``."""
        n = len(sentences)
        return cls(
            torch.tensor(sentences, device=device), torch.full((n,), step, device=device),
            torch.tensor([step + limits.max_len[s] for s in sentences], device=device),
            torch.tensor([step + limits.min_len[s] for s in sentences], device=device),
            start_tokens(n, device), torch.zeros(n, device=device),
            forced_tokens(limits.forced, sentences, device), origin=step,
        )

    def keep(self, index: Tensor) -> None:
        """Keep rows ``index`` (B'',)."""
        for name in ("sentence", "born", "limit", "shortest", "tokens", "logprob", "forced"):
            setattr(self, name, getattr(self, name)[index])

    def extend(self, new: _Rows) -> None:
        """Append ``new`` rows, which start at the next step: the token columns no row reads go."""
        first = int(self.born.min())
        self.tokens, self.origin = self.tokens[:, first - self.origin :], first
        for name in ("sentence", "born", "limit", "shortest", "logprob", "forced"):
            setattr(self, name, torch.cat([getattr(self, name), getattr(new, name)]))
        joining = joining_tokens(new.tokens.size(0), self.tokens.size(1), self.tokens.device)  # BOS last
        self.tokens = torch.cat([self.tokens, joining])

    def outputs(self, rows: Tensor, limits: _Limits) -> list[tuple[int, list[Hypothesis]]]:
        """(sentence, [hypothesis]) of ``rows`` (m,) that just produced EOS (the last token column)."""
        histories = self.tokens[rows, :-1].tolist()
        starts = (self.born[rows] - self.origin + 1).tolist()  # the column after each row's BOS
        return [
            (sent, [limits.hypothesis(sent, history[start:], lp)])
            for sent, start, history, lp in zip(
                self.sentence[rows].tolist(), starts, histories, self.logprob[rows].tolist(), strict=True
            )
        ]


def _decode_rows(
    model: DecodableModel, queue: SentenceQueue, sentences: list[int], enc: EncodedRows, choose: Chooser,
    results: list[list[Hypothesis]], limits: _Limits, vocab_size: int | None, on_done: SentencesDone | None,
) -> None:
    """Decode ``sentences`` (taken from ``queue``, encoded as ``enc``) until every sentence taken has ended;
    more sentences join from ``queue`` as others leave."""
    device = queue.src.device
    rows = _Rows.starting(sentences, 0, limits, device)
    ban_until = max(limits.min_len[s] for s in sentences)  # the step before which some row may not end
    forcing = 0 if limits.forces(sentences) else -1  # the step at which rows start with a forced first token
    cache = model.new_cache()

    for step in itertools.count():
        logits = model.decode(rows.tokens[:, -1:], enc, cache)  # (B', 1, V)
        # (B', V): the log-probs, or without scores the logits (the same largest entry), PAD/BOS banned in both
        candidates = log_probs(logits, vocab_size) if limits.scores else ban_(logits[:, -1, :].float(), vocab_size)
        at_limit = step >= rows.limit  # (B',)
        if bool(at_limit.any()):
            force_eos_(candidates, at_limit)
        if step < ban_until:
            ban_eos_(candidates, step < rows.shortest)
        if step == forcing:
            force_first_(candidates, rows.forced.masked_fill(rows.born != step, -1))
        tok = choose(candidates)  # (B',)
        if limits.scores:
            rows.logprob = rows.logprob + candidates.gather(1, tok.unsqueeze(1)).squeeze(1)
        rows.tokens = torch.cat([rows.tokens, tok.unsqueeze(1)], dim=1)  # (B', t + 2)
        ended = tok == EOS_ID  # (B',)
        if bool(ended.any()):
            found = rows.outputs(ended.nonzero().squeeze(1), limits)
            for sent, hyps in found:
                results[sent] = hyps
            if on_done is not None:
                on_done(found)
            if bool(ended.all()):
                return
            keep = torch.tensor(fill_from_the_end(ended.tolist()), device=device)  # (B'',) few rows move
            cache.reorder(keep)
            enc.reorder(keep)
            rows.keep(keep)
        if queue.wants(rows.sentence.numel()):  # continuous batching: new sentences take the free places
            joining = queue.take(rows.sentence.numel())
            model.join(enc, cache, queue.encoded(model.encode, joining))
            rows.extend(_Rows.starting(joining, step + 1, limits, device))
            ban_until = max(ban_until, step + 1 + max(limits.min_len[s] for s in joining))
            forcing = step + 1 if limits.forces(joining) else forcing


def _argmax(lprobs: Tensor) -> Tensor:
    return argmax_rows(lprobs)  # (B',) as lprobs.argmax(dim=-1)


@torch.inference_mode()
def greedy_search(
    model: DecodableModel,
    src: Tensor,
    src_pad_mask: Tensor,
    cfg: DecodeConfig,
    *,
    max_positions: int | None = None,
    vocab_size: int | None = None,
    live: list[int] | None = None,
    on_done: SentencesDone | None = None,
    scores: bool = True,
    forced: Sequence[int | None] | None = None,
) -> list[list[Hypothesis]]:
    """The greedy output of each sentence of src (B, S), as a one-element n-best list.

    Uses ``cfg.length_penalty``, ``alpha`` (the score), ``max_len_a``, ``max_len_b``, ``min_len``;
    ``live``: continuous batching (``mt.decode.refill``); ``on_done``: sentences as soon as they end;
    ``scores=False``: the same tokens without the log-softmax, NaN scores (``decode_single_path``);
    ``forced``: each sentence's forced first token or None (``mt.decode.common``)."""
    return decode_with_config(
        model, src, src_pad_mask, _argmax, cfg, max_positions, vocab_size, live, on_done, scores=scores, native=True,
        forced=forced,
    )


def decode_with_config(
    model: DecodableModel, src: Tensor, src_pad_mask: Tensor, choose: Chooser, cfg: DecodeConfig,
    max_positions: int | None, vocab_size: int | None, live: list[int] | None = None,
    on_done: SentencesDone | None = None, *, scores: bool = True, native: bool = False,
    forced: Sequence[int | None] | None = None,
) -> list[list[Hypothesis]]:
    """``decode_single_path`` with the limits and the penalty of ``cfg`` (greedy and sampling share it)."""
    check_penalty(cfg.length_penalty)
    max_len = max_output_lengths(src_pad_mask, cfg.max_len_a, cfg.max_len_b, max_positions)
    max_len, min_len = forced_limits(max_len, min_output_lengths(cfg.min_len, max_len), forced, max_positions)
    return decode_single_path(
        model, src, src_pad_mask, choose,
        max_len=max_len, min_len=min_len,
        penalty=cfg.length_penalty, alpha=cfg.alpha, vocab_size=vocab_size, live=live,
        on_done=on_done, scores=scores, native=native, forced=forced,
    )
