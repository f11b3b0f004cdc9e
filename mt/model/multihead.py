"""Multi-head attention (Vaswani et al. 2017, section 3.2.2) and its modern options.

Options, each off by default (the default module, its state_dict keys and its numerics are the paper's):

- ``kv_heads`` < ``heads``: grouped-query attention (Ainslie et al. 2023; ``kv_heads=1`` is multi-query
  attention, Shazeer 2019). Keys and values get ``kv_heads`` heads of the same head size, each shared by
  ``heads / kv_heads`` query heads; the K/V projections and the decoding cache shrink by that factor.
- ``qk_norm``: an RMSNorm with a learned gain over each head's query and key vectors before the dot
  product (Dehghani et al. 2023; OLMo 2), for self- and encoder-decoder attention.
- ``rope``: rotary position embeddings (``mt.model.rope``) on self-attention queries and keys (after
  ``qk_norm``); the caller passes each call's first position ``start``.
"""

from __future__ import annotations

from torch import Tensor, nn

from mt.model.attention import AttentionCache, attention
from mt.model.norms import NORM_EPS
from mt.model.rope import RotaryEmbedding


class MultiHeadAttention(nn.Module):
    """Multi-head attention (section 3.2.2), one module for both uses in the Transformer.

    ``self_attention=True``: queries, keys and values all come from ``x`` through one fused (D -> 3D)
    projection ``qkv`` (with ``kv_heads < heads``: ``q`` (D -> D) and ``kv`` (D -> 2 Hkv Dh)).
    ``self_attention=False`` (encoder-decoder attention): queries come from ``x`` through ``q`` (D -> D),
    keys and values from ``memory`` through one fused ``kv`` (D -> 2 Hkv Dh).
    Heads are a reshape (B, T, D) -> (B, H, T, Dh), never a loop.
    """

    def __init__(
        self,
        d_model: int,
        heads: int,
        *,
        self_attention: bool,
        dropout: float = 0.0,
        kv_heads: int = 0,
        qk_norm: bool = False,
        rope: RotaryEmbedding | None = None,
    ) -> None:
        super().__init__()
        kv_heads = kv_heads or heads
        if d_model % heads != 0:
            raise ValueError(f"d_model={d_model} is not divisible by heads={heads}")
        if heads % kv_heads != 0:
            raise ValueError(f"kv_heads={kv_heads} does not divide heads={heads}")
        if rope is not None and not self_attention:
            raise ValueError("rotary position embeddings apply to self-attention only")
        self.d_model, self.heads, self.head_dim = d_model, heads, d_model // heads
        self.kv_heads, self.kv_dim = kv_heads, kv_heads * self.head_dim
        self.self_attention = self_attention
        self.fused = self_attention and kv_heads == heads
        self.dropout = dropout
        if self.fused:
            self.qkv = nn.Linear(d_model, 3 * d_model)
        else:
            self.q = nn.Linear(d_model, d_model)
            self.kv = nn.Linear(d_model, 2 * self.kv_dim)
        self.out = nn.Linear(d_model, d_model)
        self.q_norm = nn.RMSNorm(self.head_dim, eps=NORM_EPS) if qk_norm else None
        self.k_norm = nn.RMSNorm(self.head_dim, eps=NORM_EPS) if qk_norm else None
        self.rope = rope
        self.reset_parameters()

    def reset_parameters(self) -> None:
        """fairseq's initialisation: Xavier-uniform per Q, K or V block (D or Hkv Dh rows), gain 1/sqrt(2)
        for the Q, K and V projections and 1 for the output projection; zero biases.

        The 1/sqrt(2) is what Xavier on one fused (3D, D) matrix gives each block (fan_in + fan_out =
        4D instead of 2D), i.e. the original Transformer's init. With gain 1, Q and K start with twice
        the variance and the initial attention logits with four times (peakier attention), and
        training is far slower: on Multi30k the 4+4-layer d=128 model (lr 5e-3) had valid BLEU 9.1 /
        perplexity 34.6 after 1,000 updates with gain 1 (and still 9.7 / 17.1 after 3,000), against
        23.1 / 16.6 with this init.
        """
        blocks = ((self.qkv, self.d_model),) if self.fused else ((self.q, self.d_model), (self.kv, self.kv_dim))
        for linear, rows in blocks:
            for block in linear.weight.data.split(rows, dim=0):
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
        start: int | Tensor = 0,
    ) -> Tensor:
        """x: (B, T, D) at positions ``start ..``; memory: (B, S, D) for encoder-decoder attention -> (B, T, D).

        With a ``cache`` (incremental decoding), ``mask`` and ``is_causal`` come from the cache:
        self-attention appends this call's K/V (rotated, with RoPE) and attends over all of them;
        encoder-decoder attention projects ``memory`` on the first call only (later calls do not read it).
        """
        p = self.dropout if self.training else 0.0
        if cache is None:
            q, k, v = self._project(x, memory, start)
            out, _ = attention(q, k, v, mask, is_causal=is_causal, dropout_p=p)  # (B, H, T, Dh)
        elif self.self_attention:
            q, k, v = self._project(x, None, start)
            out = cache.self_kv(k, v).attend(q, dropout_p=p)
        else:
            q = self._queries(x)
            out = cache.cross_kv(lambda: self.project_memory(memory)).attend(q, dropout_p=p)
        return self.out(self._merge_heads(out))  # (B, T, D)

    def step(self, x: Tensor, memory: Tensor | None, cache: AttentionCache, start: int | Tensor) -> Tensor:
        """``forward(x, memory, cache=cache, start=start)`` in inference (no dropout), with fewer Python
        calls per decoding step: the linears' ``forward`` without the module call (no hooks run here) and
        ``attend_step``'s matmuls on 3-D views; the same kernels on the same operands, so the result is
        the same bit for bit. x (N, T, D) -> (N, T, D)."""
        plain = self.q_norm is None and self.rope is None
        if self.self_attention:
            if self.fused and plain:
                n, length, _ = x.shape
                qkv = self.qkv.forward(x).view(n, length, 3, self.heads, self.head_dim)  # (N, T, 3, H, Dh)
                # the views _project makes (same storage and strides), in 2 ops instead of 7
                q, k, v = qkv.permute(2, 0, 3, 1, 4).unbind(0)  # (N, H, T, Dh) each
            else:
                q, k, v = self._project(x, None, start)
            out = cache.self_kv(k, v).attend_step(q)
        else:
            q = self._split_heads(self.q.forward(x), self.heads) if plain else self._queries(x)
            out = cache.cross_kv(lambda: self.project_memory(memory)).attend_step(q)
        return self.out.forward(self._merge_heads(out))  # (N, T, D)

    def attention_weights(
        self, x: Tensor, memory: Tensor | None = None, *, mask: Tensor | None = None, is_causal: bool = False
    ) -> Tensor:
        """The attention weights (B, H, T, S) for ``x`` (reference path, no cache)."""
        q, k, v = self._project(x, memory, 0)
        _, weights = attention(q, k, v, mask, is_causal=is_causal, need_weights=True)
        assert weights is not None
        return weights

    def _project(self, x: Tensor, memory: Tensor | None, start: int | Tensor) -> tuple[Tensor, Tensor, Tensor]:
        """Queries (B, H, T, Dh) from ``x``; keys and values (B, Hkv, T or S, Dh) from ``x`` or ``memory``."""
        if not self.self_attention:
            return self._queries(x), *self.project_memory(memory)
        if self.fused:
            q, k, v = (self._split_heads(t, self.heads) for t in self.qkv(x).split(self.d_model, dim=-1))
            if self.q_norm is None and self.rope is None:
                return q, k, v  # the paper's attention
        else:
            q = self._split_heads(self.q(x), self.heads)
            k, v = self._split_kv(self.kv(x))
        q, k = self._normed(q, self.q_norm), self._normed(k, self.k_norm)
        if self.rope is not None:
            q, k = self.rope(q, start), self.rope(k, start)
        return q, k, v

    def _queries(self, x: Tensor) -> Tensor:
        """Encoder-decoder attention's queries (B, H, T, Dh)."""
        return self._normed(self._split_heads(self.q(x), self.heads), self.q_norm)

    def project_memory(self, memory: Tensor | None) -> tuple[Tensor, Tensor]:
        """Encoder-decoder attention's keys and values of ``memory`` (B, S, D)."""
        if memory is None:
            raise ValueError("encoder-decoder attention needs `memory` (or a filled cache)")
        k, v = self._split_kv(self.kv(memory))
        return self._normed(k, self.k_norm), v  # (B, Hkv, S, Dh) each

    def _split_kv(self, kv: Tensor) -> tuple[Tensor, Tensor]:
        """(B, S, 2 Hkv Dh) -> keys, values (B, Hkv, S, Dh)."""
        k, v = (self._split_heads(t, self.kv_heads) for t in kv.split(self.kv_dim, dim=-1))
        return k, v

    @staticmethod
    def _normed(x: Tensor, norm: nn.RMSNorm | None) -> Tensor:
        """qk-norm in its gain's dtype (under autocast float32, as autocast runs LayerNorm: a bf16 input
        with an fp32 gain misses the fused kernel), the result in ``x``'s dtype."""
        return x if norm is None else norm(x.to(norm.weight.dtype)).to(x.dtype)

    def _split_heads(self, x: Tensor, heads: int) -> Tensor:
        batch, length, _ = x.shape
        return x.view(batch, length, heads, self.head_dim).transpose(1, 2)  # (B, H, T, Dh)

    def _merge_heads(self, x: Tensor) -> Tensor:
        batch, _, length, _ = x.shape
        if length == 1 and x.is_contiguous():  # a decoding step: (B, H, 1, Dh) is (B, 1, D) in memory
            return x.view(batch, 1, self.d_model)
        return x.transpose(1, 2).reshape(batch, length, self.d_model)  # (B, T, D)
