"""Encoder and decoder layers (Vaswani et al. 2017, section 3.1) and their parts."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from torch import Tensor, nn

from mt.model.attention import AttentionCache
from mt.model.dropout import Dropout
from mt.model.multihead import MultiHeadAttention
from mt.model.norms import make_norm
from mt.model.rope import RotaryEmbedding

ACTIVATIONS: dict[str, Callable[[], nn.Module]] = {"relu": nn.ReLU, "gelu": nn.GELU, "silu": nn.SiLU}
GATED = ("swiglu",)


def swiglu_hidden_size(d_ff: int, override: int = 0) -> int:
    """The SwiGLU hidden size: ``override`` if > 0, else 2 d_ff / 3 rounded to the nearest multiple of 8
    (at least 8), so that its three matrices hold about as many weights as the ReLU FFN's two."""
    return override if override > 0 else max(8, 8 * round(2 * d_ff / 3 / 8))


class FeedForward(nn.Module):
    """Position-wise feed-forward network FFN(x) = W2 act(W1 x + b1) + b2 (section 3.3).

    ``activation="swiglu"`` (Shazeer 2020, "GLU Variants Improve Transformer"): the gated
    FFN(x) = W2 (silu(W1 x + b1) * (W3 x + b3)) + b2 with hidden size ``swiglu_hidden_size(d_ff, hidden)``.
    """

    def __init__(
        self,
        d_model: int,
        d_ff: int,
        *,
        activation: str = "relu",
        activation_dropout: float = 0.0,
        swiglu_hidden: int = 0,
    ) -> None:
        super().__init__()
        if activation not in ACTIVATIONS and activation not in GATED:
            raise ValueError(f"activation must be one of {sorted([*ACTIVATIONS, *GATED])}, got {activation!r}")
        gated = activation in GATED
        hidden = swiglu_hidden_size(d_ff, swiglu_hidden) if gated else d_ff
        self.fc1 = nn.Linear(d_model, hidden)
        self.activation = nn.SiLU() if gated else ACTIVATIONS[activation]()
        self.gate = nn.Linear(d_model, hidden) if gated else None  # W3, the linear half of the GLU
        self.dropout = Dropout(activation_dropout)
        self.fc2 = nn.Linear(hidden, d_model)
        for linear in (self.fc1, self.fc2) if self.gate is None else (self.fc1, self.gate, self.fc2):
            nn.init.xavier_uniform_(linear.weight)
            nn.init.zeros_(linear.bias)

    def forward(self, x: Tensor) -> Tensor:
        """(B, T, D) -> (B, T, D)."""
        h = self.activation(self.fc1(x))  # (B, T, hidden)
        if self.gate is not None:
            h = h * self.gate(x)
        return self.fc2(self.dropout(h))

    def step(self, x: Tensor) -> Tensor:
        """``forward`` in inference (no dropout): the same ops, without the module calls."""
        h = self.activation.forward(self.fc1.forward(x))  # (B, T, hidden)
        if self.gate is not None:
            h = h * self.gate.forward(x)
        return self.fc2.forward(h)


class Residual(nn.Module):
    """A residual connection around a sublayer with layer normalization and dropout (section 5.4).

    Post-LN (the paper): ``LN(x + Dropout(f(x)))``. Pre-LN (Xiong et al. 2020, "On Layer Normalization
    in the Transformer Architecture"): ``x + Dropout(f(LN(x)))``, which trains without warmup
    trouble; its stack then needs a final LayerNorm (see ``Encoder``/``Decoder``). ``norm`` picks
    LayerNorm or RMSNorm (``mt.model.norms``) for either placement.
    """

    def __init__(self, d_model: int, *, dropout: float, pre_ln: bool, norm: str = "layernorm") -> None:
        super().__init__()
        self.norm = make_norm(norm, d_model)
        self.dropout = Dropout(dropout)
        self.pre_ln = pre_ln

    def forward(self, x: Tensor, sublayer: Callable[[Tensor], Tensor]) -> Tensor:
        if self.pre_ln:
            return x + self.dropout(sublayer(self.norm(x)))
        return self.norm(x + self.dropout(sublayer(x)))

    def sublayer_input(self, x: Tensor) -> Tensor:
        """What ``forward`` feeds the sublayer (for inspecting it, e.g. attention weights)."""
        return self.norm.forward(x) if self.pre_ln else x

    def close(self, x: Tensor, out: Tensor) -> Tensor:
        """``forward``'s result from the sublayer's output ``out`` on ``sublayer_input(x)``, in inference
        (dropout is the identity): decoding steps call the two halves instead of passing a closure."""
        return x + out if self.pre_ln else self.norm.forward(x + out)


class EncoderLayer(nn.Module):
    """Self-attention then a feed-forward network, each in a ``Residual`` (section 3.1, encoder)."""

    def __init__(
        self,
        *,
        d_model: int,
        heads: int,
        d_ff: int,
        dropout: float,
        attention_dropout: float = 0.0,
        activation: str = "relu",
        activation_dropout: float = 0.0,
        pre_ln: bool = False,
        norm: str = "layernorm",
        swiglu_hidden: int = 0,
        kv_heads: int = 0,
        qk_norm: bool = False,
        rope: RotaryEmbedding | None = None,
    ) -> None:
        super().__init__()
        attn: dict[str, Any] = dict(dropout=attention_dropout, kv_heads=kv_heads, qk_norm=qk_norm)
        res: dict[str, Any] = dict(dropout=dropout, pre_ln=pre_ln, norm=norm)
        self.self_attn = MultiHeadAttention(d_model, heads, self_attention=True, rope=rope, **attn)
        self.ffn = FeedForward(
            d_model, d_ff, activation=activation, activation_dropout=activation_dropout, swiglu_hidden=swiglu_hidden
        )
        self.self_attn_res = Residual(d_model, **res)
        self.ffn_res = Residual(d_model, **res)

    def forward(self, x: Tensor, mask: Tensor | None) -> Tensor:
        """x (B, S, D); mask: bool (B, 1, 1, S), True = may attend -> (B, S, D)."""
        x = self.self_attn_res(x, lambda h: self.self_attn(h, mask=mask))
        return self.ffn_res(x, self.ffn)


class DecoderLayer(nn.Module):
    """Causal self-attention, encoder-decoder attention, then a feed-forward network (section 3.1, decoder).

    Self-attention is masked only causally: targets are right-padded, so no real token ever sees a pad.
    """

    def __init__(
        self,
        *,
        d_model: int,
        heads: int,
        d_ff: int,
        dropout: float,
        attention_dropout: float = 0.0,
        activation: str = "relu",
        activation_dropout: float = 0.0,
        pre_ln: bool = False,
        norm: str = "layernorm",
        swiglu_hidden: int = 0,
        kv_heads: int = 0,
        qk_norm: bool = False,
        rope: RotaryEmbedding | None = None,
    ) -> None:
        super().__init__()
        attn: dict[str, Any] = dict(dropout=attention_dropout, kv_heads=kv_heads, qk_norm=qk_norm)
        res: dict[str, Any] = dict(dropout=dropout, pre_ln=pre_ln, norm=norm)
        self.self_attn = MultiHeadAttention(d_model, heads, self_attention=True, rope=rope, **attn)
        self.cross_attn = MultiHeadAttention(d_model, heads, self_attention=False, **attn)
        self.ffn = FeedForward(
            d_model, d_ff, activation=activation, activation_dropout=activation_dropout, swiglu_hidden=swiglu_hidden
        )
        self.self_attn_res = Residual(d_model, **res)
        self.cross_attn_res = Residual(d_model, **res)
        self.ffn_res = Residual(d_model, **res)

    def forward(
        self,
        x: Tensor,
        memory: Tensor,
        memory_mask: Tensor | None,
        cache: AttentionCache | None = None,
        start: int | Tensor = 0,
    ) -> Tensor:
        """x (B, T, D) at positions ``start ..``; memory (B, S, D); memory_mask: bool (B, 1, 1, S), True =
        may attend -> (B, T, D).

        With a ``cache`` (incremental decoding) the masks come from it and ``memory_mask`` is unused."""
        x = self.self_attn_res(x, lambda h: self.self_attn(h, is_causal=True, cache=cache, start=start))
        x = self.cross_attn_res(x, lambda h: self.cross_attn(h, memory, mask=memory_mask, cache=cache))
        return self.ffn_res(x, self.ffn)

    def step(self, x: Tensor, memory: Tensor, cache: AttentionCache, start: int | Tensor) -> Tensor:
        """``forward(x, memory, None, cache, start)`` in inference (eval mode): the same ops in the same
        order, without the per-sublayer module calls and closures, which are a large part of a decoding
        step of a small model on a CPU."""
        res = self.self_attn_res
        x = res.close(x, self.self_attn.step(res.sublayer_input(x), None, cache, start))
        res = self.cross_attn_res
        x = res.close(x, self.cross_attn.step(res.sublayer_input(x), memory, cache, start))
        res = self.ffn_res
        return res.close(x, self.ffn.step(res.sublayer_input(x)))

    def cross_attention_weights(self, x: Tensor, memory: Tensor, memory_mask: Tensor | None) -> Tensor:
        """The encoder-decoder attention weights (B, H, T, S) of this layer for input ``x`` (B, T, D)."""
        x = self.self_attn_res(x, lambda h: self.self_attn(h, is_causal=True))
        h = self.cross_attn_res.sublayer_input(x)
        return self.cross_attn.attention_weights(h, memory, mask=memory_mask)
