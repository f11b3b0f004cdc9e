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
from collections.abc import Callable

import torch
from torch import Tensor

from mt.config import DecodeConfig
from mt.decode.common import (
    EOS_ID,
    DecodableModel,
    Hypothesis,
    ban_eos_,
    fill_from_the_end,
    force_eos_,
    log_probs,
    max_output_lengths,
    min_output_lengths,
    start_tokens,
)
from mt.decode.length_penalty import check_penalty, length_penalty
from mt.decode.refill import SentenceQueue, SentencesDone, joining_tokens

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
) -> list[list[Hypothesis]]:
    """One hypothesis per sentence of src (B, S), each next token picked by ``choose``.

    ``max_len``, ``min_len``: pieces per sentence at most, and before EOS is allowed; ``penalty``,
    ``alpha``: the length penalty of the score; ids ``>= vocab_size`` are never generated; ``live``:
    continuous batching (``mt.decode.refill``); ``on_done`` hears sentences as soon as they end.
    """
    results: list[list[Hypothesis]] = [[] for _ in range(src.size(0))]
    queue = SentenceQueue(src, src_pad_mask, live)
    while queue:
        _decode_rows(model, queue, choose, results, max_len, min_len, penalty, alpha, vocab_size, on_done)
    return results


def _decode_rows(
    model: DecodableModel, queue: SentenceQueue, choose: Chooser, results: list[list[Hypothesis]],
    max_len: list[int], min_len: list[int], penalty: str, alpha: float, vocab_size: int | None,
    on_done: SentencesDone | None,
) -> None:
    """Decode until every sentence taken from ``queue`` has ended; sentences join as others leave."""
    sentences = queue.take(0)
    src, src_pad_mask = queue.sources(sentences)
    device = src.device
    active = torch.tensor(sentences, device=device)  # (B',) original sentence of each row
    born = torch.zeros(len(sentences), dtype=torch.long, device=device)  # (B',) step each row started at
    limit = torch.tensor([max_len[s] for s in sentences], device=device)  # (B',) in steps (born + max_len)
    shortest = torch.tensor([min_len[s] for s in sentences], device=device)  # (B',) likewise
    ban_until = max(min_len[s] for s in sentences)  # steps before which some row may not end
    origin = 0  # the step of ``tokens``' first column
    enc = model.encode(src, src_pad_mask)
    cache = model.new_cache()
    tokens = start_tokens(len(sentences), device)  # (B', t + 1)
    logprob = torch.zeros(len(sentences), device=device)  # (B',)

    for step in itertools.count():
        lprobs = log_probs(model.decode(tokens[:, -1:], enc, cache), vocab_size)  # (B', V)
        at_limit = step >= limit  # (B',)
        if bool(at_limit.any()):
            force_eos_(lprobs, at_limit)
        if step < ban_until:
            ban_eos_(lprobs, step < shortest)
        tok = choose(lprobs)  # (B',)
        logprob = logprob + lprobs.gather(1, tok.unsqueeze(1)).squeeze(1)
        tokens = torch.cat([tokens, tok.unsqueeze(1)], dim=1)  # (B', t + 2)
        ended = tok == EOS_ID  # (B',)
        if bool(ended.any()):
            rows = ended.nonzero().squeeze(1)
            for sent, first, history, lp_sum in zip(
                active[rows].tolist(), (born[rows] - origin).tolist(), tokens[rows, :-1].tolist(),
                logprob[rows].tolist(), strict=True,
            ):
                history = history[first + 1 :]  # after the row's BOS
                results[sent] = [Hypothesis(history, lp_sum / length_penalty(len(history) + 1, penalty, alpha), lp_sum)]
            if on_done is not None:
                on_done([(sent, results[sent]) for sent in active[rows].tolist()])
            if bool(ended.all()):
                return
            keep = torch.tensor(fill_from_the_end(ended.tolist()), device=device)  # (B'',) few rows move
            cache.reorder(keep)
            enc.reorder(keep)
            active, born, tokens, logprob, limit, shortest = (
                t[keep] for t in (active, born, tokens, logprob, limit, shortest)
            )
        if queue.wants(active.numel()):  # continuous batching: new sentences take the free places
            joining = queue.take(active.numel())
            model.join(enc, cache, *queue.sources(joining))
            starts = int(born.min())
            tokens, origin = tokens[:, starts - origin :], starts  # columns no row reads go
            n = len(joining)
            active = torch.cat([active, torch.tensor(joining, device=device)])
            born = torch.cat([born, born.new_full((n,), step + 1)])
            limit = torch.cat([limit, torch.tensor([step + 1 + max_len[s] for s in joining], device=device)])
            shortest = torch.cat([shortest, torch.tensor([step + 1 + min_len[s] for s in joining], device=device)])
            ban_until = max(ban_until, step + 1 + max(min_len[s] for s in joining))
            tokens = torch.cat([tokens, joining_tokens(n, tokens.size(1), device)])
            logprob = torch.cat([logprob, logprob.new_zeros(n)])


def _argmax(lprobs: Tensor) -> Tensor:
    return lprobs.argmax(dim=-1)  # (B',)


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
) -> list[list[Hypothesis]]:
    """The greedy output of each sentence of src (B, S), as a one-element n-best list.

    Uses ``cfg.length_penalty``, ``alpha`` (the score), ``max_len_a``, ``max_len_b``, ``min_len``;
    ``live``: continuous batching (``mt.decode.refill``); ``on_done``: sentences as soon as they end."""
    return decode_with_config(model, src, src_pad_mask, _argmax, cfg, max_positions, vocab_size, live, on_done)


def decode_with_config(
    model: DecodableModel, src: Tensor, src_pad_mask: Tensor, choose: Chooser, cfg: DecodeConfig,
    max_positions: int | None, vocab_size: int | None, live: list[int] | None = None,
    on_done: SentencesDone | None = None,
) -> list[list[Hypothesis]]:
    """``decode_single_path`` with the limits and the penalty of ``cfg`` (greedy and sampling share it)."""
    check_penalty(cfg.length_penalty)
    max_len = max_output_lengths(src_pad_mask, cfg.max_len_a, cfg.max_len_b, max_positions)
    return decode_single_path(
        model, src, src_pad_mask, choose,
        max_len=max_len, min_len=min_output_lengths(cfg.min_len, max_len),
        penalty=cfg.length_penalty, alpha=cfg.alpha, vocab_size=vocab_size, live=live,
        on_done=on_done,
    )
