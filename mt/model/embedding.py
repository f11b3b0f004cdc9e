"""Token embeddings and positional encodings (Vaswani et al. 2017, sections 3.4 and 3.5)."""

from __future__ import annotations

import math

import torch
from torch import Tensor, nn

from mt.model.dropout import Dropout


def token_embedding(vocab_size: int, d_model: int, pad_id: int) -> nn.Embedding:
    """A (V, D) embedding initialised N(0, D^-0.5) with a zero padding row (fairseq, tensor2tensor).

    With the sqrt(D) scale in ``TransformerEmbedding`` the scaled vectors have unit-variance entries,
    and as the tied output projection the initial logits are of order 1.
    """
    embedding = nn.Embedding(vocab_size, d_model, padding_idx=pad_id)
    nn.init.normal_(embedding.weight, mean=0.0, std=d_model**-0.5)
    with torch.no_grad():
        embedding.weight[pad_id].zero_()
    return embedding


def sinusoid_table(positions: Tensor, d_model: int) -> Tensor:
    """Sinusoidal encodings (len, D) of ``positions`` (len,), laid out as [sin | cos] halves.

    The formula of fairseq's ``SinusoidalPositionalEmbedding.get_embedding`` (also Marian and
    CTranslate2): for i < D/2, ``freq_i = exp(-log(10000) * i / (D/2 - 1))``, column ``i`` holds
    ``sin(pos * freq_i)`` and column ``D/2 + i`` holds ``cos(pos * freq_i)``; an odd D gets a zero last
    column. The paper (section 3.5) interleaves sin/cos and divides by D/2 rather than D/2 - 1: the
    same family of functions with the columns permuted, which a model trained from scratch cannot tell.
    """
    half = d_model // 2
    freq = torch.exp(
        torch.arange(half, dtype=torch.float32, device=positions.device) * -(math.log(10000.0) / (half - 1))
    )
    angles = positions.to(torch.float32)[:, None] * freq[None, :]  # (len, D/2)
    table = torch.cat([torch.sin(angles), torch.cos(angles)], dim=1)  # (len, 2 * (D/2))
    if d_model % 2 == 1:
        table = torch.cat([table, table.new_zeros(len(positions), 1)], dim=1)
    return table


def row_positions(start: Tensor, length: int) -> Tensor:
    """Positions (B, T) of ``length`` steps from each row's own ``start`` (B,)."""
    return start.unsqueeze(1) + torch.arange(length, device=start.device)


class SinusoidalPositions(nn.Module):
    """Fixed sinusoidal positional encodings (section 3.5), no parameters.

    Positions start at 0 for the first token (BOS on the target side). fairseq instead numbers them
    from ``padding_idx + 1`` and gives pads a zero vector; we do not need that because sequences are
    right-padded, so a real token's position never depends on the padding (pads' outputs are ignored).
    A table for ``max_positions`` is precomputed as a non-persistent buffer; longer inputs are computed
    on the fly, so there is no hard length limit.
    """

    def __init__(self, d_model: int, max_positions: int) -> None:
        super().__init__()
        self.d_model = d_model
        self.register_buffer("table", sinusoid_table(torch.arange(max_positions), d_model), persistent=False)

    def forward(self, start: int | Tensor, length: int) -> Tensor:
        """Encodings (T, D) of positions ``start .. start + length - 1``; for a per-row ``start`` (B,),
        (B, T, D) (a ragged decoding batch, ``mt.model.cache``)."""
        table: Tensor = self.table  # type: ignore[assignment]
        if isinstance(start, Tensor):
            return table[row_positions(start, length)]  # (B, T, D); decoding stays below max_positions
        if start + length <= table.size(0):
            return table[start : start + length]
        positions = torch.arange(start, start + length, device=table.device)
        return sinusoid_table(positions, self.d_model).to(table.dtype)


class LearnedPositions(nn.Module):
    """Learned positional embeddings (section 3.5) for positions below ``max_positions``."""

    def __init__(self, d_model: int, max_positions: int) -> None:
        super().__init__()
        self.max_positions = max_positions
        self.embedding = nn.Embedding(max_positions, d_model)
        nn.init.normal_(self.embedding.weight, mean=0.0, std=d_model**-0.5)

    def forward(self, start: int | Tensor, length: int) -> Tensor:
        """Embeddings (T, D) of positions ``start .. start + length - 1`` ((B, T, D) for ``start`` (B,))."""
        if isinstance(start, Tensor):
            return self.embedding(row_positions(start, length))  # (B, T, D)
        if start + length > self.max_positions:
            raise ValueError(f"position {start + length - 1} >= max_positions={self.max_positions}")
        return self.embedding.weight[start : start + length]


class TransformerEmbedding(nn.Module):
    """Token embedding * sqrt(D) + positional encoding, then dropout (sections 3.4, 3.5, 5.4).

    The token ``nn.Embedding`` is injected so the encoder, the decoder and the output projection can
    share one matrix (section 3.4, weight tying). ``positions=None``: nothing is added (rotary
    positions, ``mt.model.rope``, live in the self-attention instead).
    """

    def __init__(
        self, token: nn.Embedding, positions: SinusoidalPositions | LearnedPositions | None, *, dropout: float
    ) -> None:
        super().__init__()
        self.token = token
        self.positions = positions
        self.scale = math.sqrt(token.embedding_dim)
        self.dropout = Dropout(dropout)

    def forward(self, tokens: Tensor, start: int | Tensor = 0) -> Tensor:
        """tokens (B, T) at positions ``start ..`` (an int, or (B,): each row's own) -> (B, T, D)."""
        x = self.token(tokens) * self.scale  # (B, T, D)
        if self.positions is not None:
            x = x + self.positions(start, tokens.size(1)).to(x.dtype)  # (T, D) or (B, T, D)
        return self.dropout(x)
