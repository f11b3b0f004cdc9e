"""Encoder and decoder layers (Vaswani et al. 2017, section 3.1) and their parts."""

from __future__ import annotations

from collections.abc import Callable

from torch import Tensor, nn

from mt.model.attention import AttentionCache, MultiHeadAttention

ACTIVATIONS: dict[str, Callable[[], nn.Module]] = {"relu": nn.ReLU, "gelu": nn.GELU}


class FeedForward(nn.Module):
    """Position-wise feed-forward network FFN(x) = W2 act(W1 x + b1) + b2 (section 3.3)."""

    def __init__(
        self, d_model: int, d_ff: int, *, activation: str = "relu", activation_dropout: float = 0.0
    ) -> None:
        super().__init__()
        if activation not in ACTIVATIONS:
            raise ValueError(f"activation must be one of {sorted(ACTIVATIONS)}, got {activation!r}")
        self.fc1 = nn.Linear(d_model, d_ff)
        self.activation = ACTIVATIONS[activation]()
        self.dropout = nn.Dropout(activation_dropout)
        self.fc2 = nn.Linear(d_ff, d_model)
        for linear in (self.fc1, self.fc2):
            nn.init.xavier_uniform_(linear.weight)
            nn.init.zeros_(linear.bias)

    def forward(self, x: Tensor) -> Tensor:
        """(B, T, D) -> (B, T, D)."""
        return self.fc2(self.dropout(self.activation(self.fc1(x))))  # (B, T, d_ff) inside


class Residual(nn.Module):
    """A residual connection around a sublayer with layer normalization and dropout (section 5.4).

    Post-LN (the paper): ``LN(x + Dropout(f(x)))``. Pre-LN (Xiong et al. 2020, "On Layer Normalization
    in the Transformer Architecture"): ``x + Dropout(f(LN(x)))``, which trains without warmup
    trouble; its stack then needs a final LayerNorm (see ``Encoder``/``Decoder``).
    """

    def __init__(self, d_model: int, *, dropout: float, pre_ln: bool) -> None:
        super().__init__()
        self.norm = nn.LayerNorm(d_model)
        self.dropout = nn.Dropout(dropout)
        self.pre_ln = pre_ln

    def forward(self, x: Tensor, sublayer: Callable[[Tensor], Tensor]) -> Tensor:
        if self.pre_ln:
            return x + self.dropout(sublayer(self.norm(x)))
        return self.norm(x + self.dropout(sublayer(x)))

    def sublayer_input(self, x: Tensor) -> Tensor:
        """What ``forward`` feeds the sublayer (for inspecting it, e.g. attention weights)."""
        return self.norm(x) if self.pre_ln else x


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
    ) -> None:
        super().__init__()
        self.self_attn = MultiHeadAttention(d_model, heads, self_attention=True, dropout=attention_dropout)
        self.ffn = FeedForward(d_model, d_ff, activation=activation, activation_dropout=activation_dropout)
        self.self_attn_res = Residual(d_model, dropout=dropout, pre_ln=pre_ln)
        self.ffn_res = Residual(d_model, dropout=dropout, pre_ln=pre_ln)

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
    ) -> None:
        super().__init__()
        self.self_attn = MultiHeadAttention(d_model, heads, self_attention=True, dropout=attention_dropout)
        self.cross_attn = MultiHeadAttention(d_model, heads, self_attention=False, dropout=attention_dropout)
        self.ffn = FeedForward(d_model, d_ff, activation=activation, activation_dropout=activation_dropout)
        self.self_attn_res = Residual(d_model, dropout=dropout, pre_ln=pre_ln)
        self.cross_attn_res = Residual(d_model, dropout=dropout, pre_ln=pre_ln)
        self.ffn_res = Residual(d_model, dropout=dropout, pre_ln=pre_ln)

    def forward(
        self, x: Tensor, memory: Tensor, memory_mask: Tensor | None, cache: AttentionCache | None = None
    ) -> Tensor:
        """x (B, T, D); memory (B, S, D); memory_mask: bool (B, 1, 1, S), True = may attend -> (B, T, D).

        With a ``cache`` (incremental decoding) the masks come from it and ``memory_mask`` is unused."""
        x = self.self_attn_res(x, lambda h: self.self_attn(h, is_causal=True, cache=cache))
        x = self.cross_attn_res(x, lambda h: self.cross_attn(h, memory, mask=memory_mask, cache=cache))
        return self.ffn_res(x, self.ffn)

    def cross_attention_weights(self, x: Tensor, memory: Tensor, memory_mask: Tensor | None) -> Tensor:
        """The encoder-decoder attention weights (B, H, T, S) of this layer for input ``x`` (B, T, D)."""
        x = self.self_attn_res(x, lambda h: self.self_attn(h, is_causal=True))
        h = self.cross_attn_res.sublayer_input(x)
        return self.cross_attn.attention_weights(h, memory, mask=memory_mask)
