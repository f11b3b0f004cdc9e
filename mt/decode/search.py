"""Pick the search strategy named by ``cfg.strategy`` (beam | greedy | sample)."""

from __future__ import annotations

from collections.abc import Sequence

import torch
from torch import Tensor

from mt.config import DecodeConfig
from mt.decode.beam import beam_search
from mt.decode.common import DecodableModel, Hypothesis
from mt.decode.greedy import greedy_search
from mt.decode.refill import SentencesDone
from mt.decode.sampling import sample

STRATEGIES = ("beam", "greedy", "sample")


def check_strategy(name: str) -> None:
    if name not in STRATEGIES:
        raise ValueError(f"unknown decoding strategy {name!r}; expected one of {', '.join(STRATEGIES)}")


def search(
    model: DecodableModel,
    src: Tensor,
    src_pad_mask: Tensor,
    cfg: DecodeConfig,
    *,
    max_positions: int | None = None,
    vocab_size: int | None = None,
    generator: torch.Generator | None = None,
    live: list[int] | None = None,
    on_done: SentencesDone | None = None,
    scores: bool = True,
    forced: Sequence[int | None] | None = None,
) -> list[list[Hypothesis]]:
    """Decode src (B, S) with ``cfg.strategy``: one n-best list per sentence, best first.

    ``max_positions``: the model's position limit (caps the output length); ``vocab_size``: the target
    tokenizer's size (ids at or past it are embedding padding and never generated); ``generator``:
    the random source of ``sample`` (default: seeded with ``cfg.seed`` per call); ``live``: continuous
    batching for beam and greedy search (``mt.decode.refill``; sampling decodes the batch whole);
    ``on_done``: beam and greedy search report sentences as soon as they are final (sampling does not);
    ``scores=False``: greedy search skips the log-softmax and gives NaN scores (the tokens are the same;
    beam search and sampling need the log-probs and compute them anyway); ``forced``: each sentence's forced
    first token or None (a target language's code, ``mt.decode.common``), left out of its hypotheses.
    """
    check_strategy(cfg.strategy)
    limits = dict(max_positions=max_positions, vocab_size=vocab_size, forced=forced)
    if cfg.strategy == "beam":
        return beam_search(model, src, src_pad_mask, cfg, live=live, on_done=on_done, **limits)
    if cfg.strategy == "greedy":
        return greedy_search(model, src, src_pad_mask, cfg, live=live, on_done=on_done, scores=scores, **limits)
    return sample(model, src, src_pad_mask, cfg, generator=generator, **limits)


def rows_per_sentence(cfg: DecodeConfig) -> int:
    """Decoder rows one sentence occupies (the beam for beam search), for token budgets."""
    return cfg.beam_size if cfg.strategy == "beam" else 1
