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
) -> list[list[Hypothesis]]:
    """One hypothesis per sentence of src (B, S), each next token picked by ``choose``.

    ``max_len``, ``min_len``: pieces per sentence at most, and before EOS is allowed; ``penalty``,
    ``alpha``: the length penalty of the score; ids ``>= vocab_size`` are never generated.
    """
    n_sent, device = src.size(0), src.device
    limit = torch.tensor(max_len, device=device)  # (B',)
    shortest = torch.tensor(min_len, device=device)  # (B',)
    enc = model.encode(src, src_pad_mask)
    cache = model.new_cache()
    active = torch.arange(n_sent, device=device)  # (B',) original sentence of each row
    tokens = start_tokens(n_sent, device)  # (B', t + 1)
    logprob = torch.zeros(n_sent, device=device)  # (B',)
    results: list[list[Hypothesis]] = [[] for _ in range(n_sent)]

    for step in range(max(max_len) + 1):
        lprobs = log_probs(model.decode(tokens[:, -1:], enc, cache), vocab_size)  # (B', V)
        at_limit = step >= limit  # (B',)
        if bool(at_limit.any()):
            force_eos_(lprobs, at_limit)
        if step < max(min_len, default=0):
            ban_eos_(lprobs, step < shortest)
        tok = choose(lprobs)  # (B',)
        logprob = logprob + lprobs.gather(1, tok.unsqueeze(1)).squeeze(1)
        tokens = torch.cat([tokens, tok.unsqueeze(1)], dim=1)  # (B', t + 2)
        ended = tok == EOS_ID  # (B',)
        if not bool(ended.any()):
            continue
        rows = ended.nonzero().squeeze(1)
        for sent, history, lp_sum in zip(
            active[rows].tolist(), tokens[rows, 1:-1].tolist(), logprob[rows].tolist(), strict=True
        ):
            lp = length_penalty(len(history) + 1, penalty, alpha)
            results[sent] = [Hypothesis(history, lp_sum / lp, lp_sum)]
        if bool(ended.all()):
            break
        keep = torch.tensor(fill_from_the_end(ended.tolist()), device=device)  # (B'',) few rows move
        cache.reorder(keep)
        enc.reorder(keep)
        active, tokens, logprob, limit, shortest = (t[keep] for t in (active, tokens, logprob, limit, shortest))
    return results


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
) -> list[list[Hypothesis]]:
    """The greedy output of each sentence of src (B, S), as a one-element n-best list.

    Uses ``cfg.length_penalty``, ``alpha`` (the score), ``max_len_a``, ``max_len_b``, ``min_len``."""
    return decode_with_config(model, src, src_pad_mask, _argmax, cfg, max_positions, vocab_size)


def decode_with_config(
    model: DecodableModel, src: Tensor, src_pad_mask: Tensor, choose: Chooser, cfg: DecodeConfig,
    max_positions: int | None, vocab_size: int | None,
) -> list[list[Hypothesis]]:
    """``decode_single_path`` with the limits and the penalty of ``cfg`` (greedy and sampling share it)."""
    check_penalty(cfg.length_penalty)
    max_len = max_output_lengths(src_pad_mask, cfg.max_len_a, cfg.max_len_b, max_positions)
    return decode_single_path(
        model, src, src_pad_mask, choose,
        max_len=max_len, min_len=min_output_lengths(cfg.min_len, max_len),
        penalty=cfg.length_penalty, alpha=cfg.alpha, vocab_size=vocab_size,
    )
