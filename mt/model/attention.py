"""Scaled dot-product attention and multi-head attention (Vaswani et al. 2017, sections 3.2.1-3.2.2).

Masks here follow the ``scaled_dot_product_attention`` convention: a bool ``mask`` is True where a query
MAY attend to a key, broadcastable to (B, H, T, S). (Padding masks elsewhere are True = padding; the
callers invert them once, ``~pad_mask[:, None, None, :]``.) ``is_causal`` is aligned bottom-right: query
``i`` of T sits at absolute position ``S - T + i`` and sees keys ``0 .. S - T + i``, which is what a
decoder with a K/V cache needs (for T == S it is the usual lower-triangular mask).

A fully masked row (a query that may attend to no key) cannot occur in this model: every source holds
EOS and every decoder query sees BOS. Should one occur anyway, both paths give it zero weights and a zero
output instead of NaN: the reference path fills masked scores with the dtype's finite minimum (so its
softmax, and the gradient through it, stay finite) and then zeroes masked weights, which also makes
masked weights exactly 0 in ordinary rows; PyTorch's SDPA returns zeros for such rows as well.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import Protocol

import torch
import torch.nn.functional as F
from torch import Tensor, nn


def causal_mask(queries: int, keys: int, device: torch.device | None = None) -> Tensor:
    """Bool (T, S) mask, True = may attend, aligned bottom-right (query i is at position S - T + i)."""
    return torch.ones(queries, keys, dtype=torch.bool, device=device).tril(diagonal=keys - queries)


def attention(
    q: Tensor,
    k: Tensor,
    v: Tensor,
    mask: Tensor | None = None,
    *,
    is_causal: bool = False,
    need_weights: bool = False,
    dropout_p: float = 0.0,
) -> tuple[Tensor, Tensor | None]:
    """softmax(Q K^T / sqrt(Dh) + mask) V  (section 3.2.1).

    q: (B, H, T, Dh); k, v: (B, H, S, Dh); mask: bool, True = may attend (or float, added to the
    scores), broadcastable to (B, H, T, S).
    Returns the output (B, H, T, Dh) and, with ``need_weights``, the weights (B, H, T, S) computed on
    the reference path; without it the fused ``scaled_dot_product_attention`` kernel is used.
    """
    queries, keys = q.size(-2), k.size(-2)
    if is_causal and queries == 1:
        is_causal = False  # a single new query comes last and may see every cached key
    if is_causal and (need_weights or mask is not None or queries != keys):
        causal = causal_mask(queries, keys, q.device)  # (T, S)
        mask = causal if mask is None else mask & causal
        is_causal = False
    if not need_weights:
        if q.dtype == torch.bfloat16 and q.device.type == "cpu":
            return _sdpa_in_float32(q, k, v, mask, dropout_p, is_causal), None
        out = F.scaled_dot_product_attention(
            q, k, v, attn_mask=mask, dropout_p=dropout_p, is_causal=is_causal
        )
        return out, None

    scores = (q @ k.transpose(-2, -1)) / math.sqrt(q.size(-1))  # (B, H, T, S)
    if mask is not None:
        scores = scores.masked_fill(~mask, torch.finfo(scores.dtype).min)
    weights = torch.softmax(scores, dim=-1)
    if mask is not None:
        weights = weights.masked_fill(~mask, 0.0)  # exact zeros; a fully masked row gets all zeros
    out = F.dropout(weights, p=dropout_p) @ v  # (B, H, T, Dh)
    return out, weights


def _sdpa_in_float32(q: Tensor, k: Tensor, v: Tensor, mask: Tensor | None, dropout_p: float, is_causal: bool) -> Tensor:
    """The fused kernel on float32 copies, the output back in bfloat16 (CPU bf16 autocast).

    torch 2.13's CPU flash-attention backward in bfloat16 is several times slower than in float32
    (fwd+bwd of a (160, 4, 25, 32) batch: 340 ms against 137 ms on 1 thread here), which made
    ``train.precision=bf16`` train ~13x slower than fp32. The attention matmuls are a small part of
    the FLOPs (the projections and the FFN stay in bf16), so float32 here costs little and is exact.
    """
    if mask is not None and mask.dtype != torch.bool:
        mask = mask.float()
    with torch.autocast("cpu", enabled=False):
        out = F.scaled_dot_product_attention(
            q.float(), k.float(), v.float(), attn_mask=mask, dropout_p=dropout_p, is_causal=is_causal
        )
    return out.to(torch.bfloat16)


def grouped_attention(
    q: Tensor, k: Tensor, v: Tensor, mask: Tensor | None, group: int, dropout_p: float = 0.0
) -> Tensor:
    """Attention where each ``group`` consecutive query rows share one row of keys and values.

    q: (B*g, H, T, Dh); k, v: (B, H, S, Dh); mask broadcastable to (B, H, g*T, S), its query axis
    ordered (row in group, step) -> (B*g, H, T, Dh). The g rows' queries become g*T queries of their
    group's row, so the keys and values are read once per group instead of once per row (beam search:
    the K beams of a sentence share its source and their self-attention keys, see mt.model.beam_cache).
    """
    rows, heads, length, head_dim = q.shape
    n_groups = k.size(0)
    if rows != group * n_groups:
        raise ValueError(f"{rows} query rows are not {n_groups} key rows x group {group}")
    q = q.view(n_groups, group, heads, length, head_dim).transpose(1, 2)
    q = q.reshape(n_groups, heads, group * length, head_dim)  # (B, H, g*T, Dh)
    out, _ = attention(q, k, v, mask, dropout_p=dropout_p)  # (B, H, g*T, Dh)
    return out.view(n_groups, heads, group, length, head_dim).transpose(1, 2).reshape(rows, heads, length, head_dim)


@dataclass
class CachedKeys:
    """What one cached attention call attends to, as its cache lays it out.

    ``k``, ``v`` (N / group, H, L, Dh): one row of keys per ``group`` consecutive query rows (1: one
    per row; beam search's K beams of a sentence share one). ``mask``: additive, broadcastable to
    (N / group, H, group * T, L), or None; ``is_causal``: bottom-right causal (see ``attention``).
    """

    k: Tensor
    v: Tensor
    mask: Tensor | None
    is_causal: bool = False
    group: int = 1

    def attend(self, q: Tensor, dropout_p: float = 0.0) -> Tensor:
        """q (N, H, T, Dh) -> (N, H, T, Dh)."""
        if self.group == 1:
            return attention(q, self.k, self.v, self.mask, is_causal=self.is_causal, dropout_p=dropout_p)[0]
        return grouped_attention(q, self.k, self.v, self.mask, self.group, dropout_p=dropout_p)


class AttentionCache(Protocol):
    """One decoder layer's cache during one ``decode`` call (``DecoderCache.start_call`` makes them)."""

    def self_kv(self, k: Tensor, v: Tensor) -> CachedKeys:
        """Append this call's self-attention k, v (N, H, T, Dh); return everything to attend to."""
        ...

    def cross_kv(self, project: Callable[[], tuple[Tensor, Tensor]]) -> CachedKeys:
        """The encoder-decoder keys and values, made by ``project()`` on the first call only."""
        ...


class MultiHeadAttention(nn.Module):
    """Multi-head attention (section 3.2.2), one module for both uses in the Transformer.

    ``self_attention=True``: queries, keys and values all come from ``x`` through one fused (D -> 3D)
    projection. ``self_attention=False`` (encoder-decoder attention): queries come from ``x`` through a
    (D -> D) projection, keys and values from ``memory`` through one fused (D -> 2D) projection.
    Heads are a reshape (B, T, D) -> (B, H, T, Dh), never a loop.
    """

    def __init__(self, d_model: int, heads: int, *, self_attention: bool, dropout: float = 0.0) -> None:
        super().__init__()
        if d_model % heads != 0:
            raise ValueError(f"d_model={d_model} is not divisible by heads={heads}")
        self.d_model, self.heads, self.head_dim = d_model, heads, d_model // heads
        self.self_attention = self_attention
        self.dropout = dropout
        if self_attention:
            self.qkv = nn.Linear(d_model, 3 * d_model)
        else:
            self.q = nn.Linear(d_model, d_model)
            self.kv = nn.Linear(d_model, 2 * d_model)
        self.out = nn.Linear(d_model, d_model)
        self.reset_parameters()

    def reset_parameters(self) -> None:
        """fairseq's initialisation: Xavier-uniform per (D, D) block, gain 1/sqrt(2) for the Q, K and V
        projections and 1 for the output projection; zero biases.

        The 1/sqrt(2) is what Xavier on one fused (3D, D) matrix gives each block (fan_in + fan_out =
        4D instead of 2D), i.e. the original Transformer's init. With gain 1, Q and K start with twice
        the variance and the initial attention logits with four times (peakier attention), and
        training is far slower: on Multi30k the 4+4-layer d=128 model (lr 5e-3) had valid BLEU 9.1 /
        perplexity 34.6 after 1,000 updates with gain 1 (and still 9.7 / 17.1 after 3,000), against
        23.1 / 16.6 with this init.
        """
        for linear in (self.qkv,) if self.self_attention else (self.q, self.kv):
            for block in linear.weight.data.split(self.d_model, dim=0):
                nn.init.xavier_uniform_(block, gain=2**-0.5)
            nn.init.zeros_(linear.bias)
        nn.init.xavier_uniform_(self.out.weight)
        nn.init.zeros_(self.out.bias)

    def forward(
        self,
        x: Tensor,
        memory: Tensor | None = None,
        *,
        mask: Tensor | None = None,
        is_causal: bool = False,
        cache: AttentionCache | None = None,
    ) -> Tensor:
        """x: (B, T, D); memory: (B, S, D) for encoder-decoder attention -> (B, T, D).

        With a ``cache`` (incremental decoding), ``mask`` and ``is_causal`` come from the cache:
        self-attention appends this call's K/V and attends over all of them; encoder-decoder attention
        projects ``memory`` on the first call only (later calls do not read it).
        """
        p = self.dropout if self.training else 0.0
        if cache is None:
            q, k, v = self._project(x, memory)
            out, _ = attention(q, k, v, mask, is_causal=is_causal, dropout_p=p)  # (B, H, T, Dh)
        elif self.self_attention:
            q, k, v = self._project(x, None)
            out = cache.self_kv(k, v).attend(q, dropout_p=p)
        else:
            q = self._split_heads(self.q(x))
            out = cache.cross_kv(lambda: self._project_memory(memory)).attend(q, dropout_p=p)
        return self.out(self._merge_heads(out))  # (B, T, D)

    def attention_weights(
        self, x: Tensor, memory: Tensor | None = None, *, mask: Tensor | None = None, is_causal: bool = False
    ) -> Tensor:
        """The attention weights (B, H, T, S) for ``x`` (reference path, no cache)."""
        q, k, v = self._project(x, memory)
        _, weights = attention(q, k, v, mask, is_causal=is_causal, need_weights=True)
        assert weights is not None
        return weights

    def _project(self, x: Tensor, memory: Tensor | None) -> tuple[Tensor, Tensor, Tensor]:
        """Queries (B, H, T, Dh) from ``x``; keys and values (B, H, T or S, Dh) from ``x`` or ``memory``."""
        if self.self_attention:
            q, k, v = (self._split_heads(t) for t in self.qkv(x).split(self.d_model, dim=-1))
            return q, k, v
        return self._split_heads(self.q(x)), *self._project_memory(memory)

    def _project_memory(self, memory: Tensor | None) -> tuple[Tensor, Tensor]:
        if memory is None:
            raise ValueError("encoder-decoder attention needs `memory` (or a filled cache)")
        k, v = (self._split_heads(t) for t in self.kv(memory).split(self.d_model, dim=-1))
        return k, v  # (B, H, S, Dh) each

    def _split_heads(self, x: Tensor) -> Tensor:
        batch, length, _ = x.shape
        return x.view(batch, length, self.heads, self.head_dim).transpose(1, 2)  # (B, H, T, Dh)

    def _merge_heads(self, x: Tensor) -> Tensor:
        batch, _, length, _ = x.shape
        return x.transpose(1, 2).reshape(batch, length, self.d_model)  # (B, T, D)
