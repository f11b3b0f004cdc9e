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
from torch import Tensor

from mt.model.dropout import dropout


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

    q: (B, H, T, Dh); k, v: (B, Hkv, S, Dh) with Hkv dividing H (grouped-query attention: each
    H / Hkv consecutive query heads share one K/V head); mask: bool, True = may attend (or float, added
    to the scores), broadcastable to (B, H, T, S).
    Returns the output (B, H, T, Dh) and, with ``need_weights``, the weights (B, H, T, S) computed on
    the reference path; without it the fused ``scaled_dot_product_attention`` kernel is used.
    """
    queries, keys = q.size(-2), k.size(-2)
    if is_causal and queries == 1:
        is_causal = False  # a single new query comes last and may see every cached key
    by_matmuls = need_weights or matmuls_are_faster(q, keys)
    if is_causal and (by_matmuls or mask is not None or queries != keys):
        causal = causal_mask(queries, keys, q.device)  # (T, S)
        mask = causal if mask is None else mask & causal
        is_causal = False
    gqa = k.size(-3) != q.size(-3)
    if not by_matmuls:
        if q.dtype == torch.bfloat16 and q.device.type == "cpu":
            return _sdpa_in_float32(q, k, v, mask, dropout_p, is_causal, gqa), None
        extra = {"enable_gqa": True} if gqa else {}  # no K/V copies; only when needed (same kernel as before)
        out = F.scaled_dot_product_attention(
            q, k, v, attn_mask=mask, dropout_p=dropout_p, is_causal=is_causal, **extra
        )
        return out, None
    return _attention_by_matmuls(q, k, v, mask, dropout_p, need_weights)


MATMUL_MAX_KEYS = 64  # up to here, CPU training attends with two batched matmuls (see matmuls_are_faster)
MATMUL_MAX_SCORES = 4096  # up to here (queries x keys of a head), CPU inference does too


def matmuls_are_faster(q: Tensor, keys: int) -> bool:
    """On a CPU, two batched matmuls beat the fused kernel for small attention problems.

    Training (autograd on), at most ``MATMUL_MAX_KEYS`` keys: torch 2.13's CPU flash attention, forward +
    backward of a transformer_small batch (160 x 4 heads x 26 queries and keys, Dh 64, 2 threads): 25 ms
    with a padding mask, 25 ms causal; two matmuls in float32 18 / 15 ms, in bfloat16 with a float32
    softmax 14 / 11 ms; at 50 and 100 keys (80 and 40 rows) the matmuls still win, 15 / 10 and 14 / 13 ms
    in bfloat16 against 22-25 ms. In a transformer_mini bf16 update the fused kernel was 27% of the time.

    Inference, at most ``MATMUL_MAX_SCORES`` queries x keys per head: a decoding step (1 query, or a beam's
    K queries over its sentence's shared keys) and short encoder inputs. Float32, 2 threads, fused kernel
    against matmuls: beam 4 of transformer_mini (64 x 4 heads, 4 queries, 60 / 120 keys) 997 / 961 us
    against 198 / 347 us, its cross-attention (18 keys) 595 against 119 us, transformer_base's greedy step
    (64 x 8 heads, 20 / 16 keys) 227 / 177 against 123 / 104 us, a 64 x 4 x 20 x 20 encoder batch 1,052
    against 425 us; past the limit (8 x 8 heads x 200 x 200) the fused kernel wins, 6.8 against 14.0 ms.
    The fused kernel made 40% of transformer_mini's beam-4 decoding time on Multi30k (torch.profiler).
    """
    if q.device.type != "cpu":
        return False
    if torch.is_grad_enabled():
        return keys <= MATMUL_MAX_KEYS
    return q.size(-2) * keys <= MATMUL_MAX_SCORES


def _attention_by_matmuls(
    q: Tensor, k: Tensor, v: Tensor, mask: Tensor | None, dropout_p: float, need_weights: bool
) -> tuple[Tensor, Tensor | None]:
    """The reference path: the matmuls in q's dtype, the scores and softmax in float32 (or float64)."""
    if k.size(-3) != q.size(-3):  # grouped-query attention: each K/V head repeated for its query heads
        group = q.size(-3) // k.size(-3)
        k, v = k.repeat_interleave(group, dim=-3), v.repeat_interleave(group, dim=-3)
    scores = q @ k.transpose(-2, -1)  # (B, H, T, S)
    if scores.dtype != (wide := torch.promote_types(q.dtype, torch.float32)):
        scores = scores.to(wide)
    scores = scores.mul_(1.0 / math.sqrt(q.size(-1)))
    if mask is not None and mask.dtype == torch.bool:
        scores = scores.masked_fill_(~mask, torch.finfo(scores.dtype).min)
    elif mask is not None:
        scores = scores + mask  # an additive float mask
    weights = torch.softmax(scores, dim=-1)
    if mask is not None and mask.dtype == torch.bool:
        weights = weights.masked_fill(~mask, 0.0)  # exact zeros; a fully masked row gets all zeros
    dropped = dropout(weights, dropout_p, training=True) if dropout_p > 0 else weights
    out = (dropped if dropped.dtype == v.dtype else dropped.to(v.dtype)) @ v  # (B, H, T, Dh)
    return out, weights if need_weights else None


def _sdpa_in_float32(
    q: Tensor, k: Tensor, v: Tensor, mask: Tensor | None, dropout_p: float, is_causal: bool, gqa: bool = False
) -> Tensor:
    """The fused kernel on float32 copies, the output back in bfloat16 (CPU bf16 autocast).

    torch 2.13's CPU flash-attention backward in bfloat16 is several times slower than in float32
    (fwd+bwd of a (160, 4, 25, 32) batch: 340 ms against 137 ms on 1 thread here), which made
    ``train.precision=bf16`` train ~13x slower than fp32. The attention matmuls are a small part of
    the FLOPs (the projections and the FFN stay in bf16), so float32 here costs little and is exact.
    """
    if mask is not None and mask.dtype != torch.bool:
        mask = mask.float()
    extra = {"enable_gqa": True} if gqa else {}
    with torch.autocast("cpu", enabled=False):
        out = F.scaled_dot_product_attention(
            q.float(), k.float(), v.float(), attn_mask=mask, dropout_p=dropout_p, is_causal=is_causal, **extra
        )
    return out.to(torch.bfloat16)


def grouped_attention(
    q: Tensor, k: Tensor, v: Tensor, mask: Tensor | None, group: int, dropout_p: float = 0.0
) -> Tensor:
    """Attention where each ``group`` consecutive query rows share one row of keys and values.

    q: (B*g, H, T, Dh); k, v: (B, Hkv, S, Dh); mask broadcastable to (B, H, g*T, S), its query axis
    ordered (row in group, step) -> (B*g, H, T, Dh). The g rows' queries become g*T queries of their
    group's row, so the keys and values are read once per group instead of once per row (beam search:
    the K beams of a sentence share its source and their self-attention keys, see mt.model.beam_cache).
    """
    if q.size(0) != group * k.size(0):
        raise ValueError(f"{q.size(0)} query rows are not {k.size(0)} key rows x group {group}")
    out, _ = attention(group_queries(q, group), k, v, mask, dropout_p=dropout_p)  # (B, H, g*T, Dh)
    return ungroup_queries(out, group)


def group_queries(q: Tensor, group: int) -> Tensor:
    """(B*g, H, T, Dh) -> (B, H, g*T, Dh): each ``group`` consecutive rows' queries as one row's, ordered
    (row in group, step)."""
    rows, heads, length, head_dim = q.shape
    q = q.view(rows // group, group, heads, length, head_dim).transpose(1, 2)
    return q.reshape(rows // group, heads, group * length, head_dim)


def ungroup_queries(out: Tensor, group: int) -> Tensor:
    """``group_queries`` undone: (B, H, g*T, Dh) -> (B*g, H, T, Dh)."""
    n_groups, heads, queries, head_dim = out.shape
    length = queries // group
    out = out.view(n_groups, heads, group, length, head_dim).transpose(1, 2)
    return out.reshape(n_groups * group, heads, length, head_dim)


def attend_by_bmm(q: Tensor, k: Tensor, v: Tensor, mask: Tensor | None) -> Tensor:
    """``attention(q, k, v, mask)[0]`` where ``bmm_applies``: the reference path's two batched matmuls,
    called on 3-D views (a 4-D ``matmul`` adds its own expand, reshape and view calls to each), so the same
    kernels see the same operands and the result is the same bit for bit.

    q (N, H, T, Dh); k, v (N, H, L, Dh); mask additive, broadcastable to (N, H, T, L), or None -> (N, H, T, Dh).
    """
    rows, heads, queries, head_dim = q.shape
    keys = k.size(-2)
    flat_q = q.reshape(rows * heads, queries, head_dim)  # a view where q's (N, H) merge, else the copy matmul makes
    scores = torch.bmm(flat_q, k.reshape(rows * heads, keys, head_dim).transpose(1, 2))  # (N H, T, L)
    scores = scores.mul_(1.0 / math.sqrt(head_dim)).view(rows, heads, queries, keys)
    if mask is not None:
        scores = scores + mask
    weights = torch.softmax(scores, dim=-1)  # (N, H, T, L)
    out = torch.bmm(weights.view(rows * heads, queries, keys), v.reshape(rows * heads, keys, head_dim))
    return out.view(rows, heads, queries, head_dim)


def bmm_applies(q: Tensor, k: Tensor, mask: Tensor | None, is_causal: bool) -> bool:
    """Whether ``attend_by_bmm`` gives ``attention``'s result: float32 on a CPU without autograd, where the
    reference path attends by matmuls (``matmuls_are_faster``), one K/V head per query head, an additive
    mask or none, and no causal mask to build (one query sees every cached key)."""
    return (
        q.dtype == torch.float32
        and q.device.type == "cpu"
        and not torch.is_grad_enabled()
        and k.size(-3) == q.size(-3)
        and (mask is None or mask.dtype != torch.bool)
        and (not is_causal or q.size(-2) == 1)
        and q.size(-2) * k.size(-2) <= MATMUL_MAX_SCORES
    )


@dataclass
class CachedKeys:
    """What one cached attention call attends to, as its cache lays it out.

    ``k``, ``v`` (N / group, Hkv, L, Dh): one row of keys per ``group`` consecutive query rows (1: one
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

    def attend_step(self, q: Tensor) -> Tensor:
        """``attend(q)`` in inference, by ``attend_by_bmm`` where it applies (a decoding step's fast path)."""
        if self.group == 1:
            if bmm_applies(q, self.k, self.mask, self.is_causal):
                return attend_by_bmm(q, self.k, self.v, self.mask)
            return self.attend(q)
        grouped = group_queries(q, self.group)  # (N / g, H, g T, Dh)
        if not bmm_applies(grouped, self.k, self.mask, False):
            return self.attend(q)
        return ungroup_queries(attend_by_bmm(grouped, self.k, self.v, self.mask), self.group)


class AttentionCache(Protocol):
    """One decoder layer's cache during one ``decode`` call (``DecoderCache.start_call`` makes them)."""

    def self_kv(self, k: Tensor, v: Tensor) -> CachedKeys:
        """Append this call's self-attention k, v (N, Hkv, T, Dh); return everything to attend to."""
        ...

    def cross_kv(self, project: Callable[[], tuple[Tensor, Tensor]]) -> CachedKeys:
        """The encoder-decoder keys and values, made by ``project()`` on the first call only."""
        ...


