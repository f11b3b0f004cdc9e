"""Sampling: draw each next token from the model's distribution, reshaped by temperature, top-k, top-p.

The distribution sampled from is ``softmax(log_probs / temperature)`` restricted to the ``top_k`` most
likely tokens (0 = all) and then to the smallest set whose probability reaches ``top_p`` (nucleus
sampling, Holtzman et al. 2020; 1.0 = all). The reported ``logprob`` is the model's own log-prob of the
drawn tokens (temperature 1, nothing truncated), scored with the length penalty as in beam search.
Draws come from a ``torch.Generator`` seeded with ``cfg.seed``: the same inputs, batch and seed give
the same samples.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch
from torch import Tensor

from mt.config import DecodeConfig
from mt.decode.common import NEG_INF, DecodableModel, Hypothesis
from mt.decode.greedy import Chooser, decode_with_config


def filter_top_k(logits: Tensor, k: int) -> Tensor:
    """Keep the ``k`` largest entries of each row of (N, V) (ties at the k-th kept), -inf elsewhere."""
    if k <= 0 or k >= logits.size(-1):
        return logits
    kth = logits.topk(k, dim=-1).values[:, -1:]  # (N, 1)
    return logits.masked_fill(logits < kth, NEG_INF)


def filter_top_p(logits: Tensor, p: float) -> Tensor:
    """Keep the smallest most-likely set of each row of (N, V) whose probability is >= ``p``."""
    if p >= 1.0:
        return logits
    sorted_logits, order = logits.sort(dim=-1, descending=True)  # (N, V)
    probs = sorted_logits.softmax(dim=-1)
    mass_before = probs.cumsum(dim=-1) - probs  # (N, V) probability of the better tokens
    drop_sorted = mass_before >= p  # the first token is always kept (mass_before = 0)
    drop = drop_sorted.scatter(1, order, drop_sorted)  # back to vocabulary order
    return logits.masked_fill(drop, NEG_INF)


def make_sampler(temperature: float, top_k: int, top_p: float, generator: torch.Generator) -> Chooser:
    """A ``choose`` function for ``decode_single_path``: (B', V) log-probs -> (B',) drawn ids."""
    if temperature <= 0:
        raise ValueError(f"temperature must be > 0, got {temperature} (use strategy=greedy for argmax)")
    if not 0.0 < top_p <= 1.0:
        raise ValueError(f"top_p must be in (0, 1], got {top_p}")

    def choose(lprobs: Tensor) -> Tensor:
        logits = filter_top_p(filter_top_k(lprobs / temperature, top_k), top_p)  # (B', V)
        probs = logits.softmax(dim=-1)
        return torch.multinomial(probs, 1, generator=generator).squeeze(1)  # (B',)

    return choose


@torch.inference_mode()
def sample(
    model: DecodableModel,
    src: Tensor,
    src_pad_mask: Tensor,
    cfg: DecodeConfig,
    *,
    max_positions: int | None = None,
    vocab_size: int | None = None,
    generator: torch.Generator | None = None,
    forced: Sequence[int | None] | None = None,
) -> list[list[Hypothesis]]:
    """One sampled output per sentence of src (B, S); ``generator`` defaults to one seeded with cfg.seed.

    Uses ``cfg.temperature``, ``top_k``, ``top_p``, ``seed`` and the limits and penalty as greedy does;
    ``forced``: each sentence's forced first token or None (``mt.decode.common``)."""
    if generator is None:
        generator = torch.Generator(device=src.device).manual_seed(cfg.seed)
    choose = make_sampler(cfg.temperature, cfg.top_k, cfg.top_p, generator)
    return decode_with_config(model, src, src_pad_mask, choose, cfg, max_positions, vocab_size, forced=forced)
