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


SINUSOIDS = ("fairseq", "marian")


def sinusoid_table(positions: Tensor, d_model: int, style: str = "fairseq") -> Tensor:
    """Sinusoidal encodings (len, D) of ``positions`` (len,), laid out as [sin | cos] halves.

    For i < D/2, column ``i`` holds ``sin(pos * freq_i)`` and column ``D/2 + i`` holds ``cos(pos * freq_i)``;
    an odd D gets a zero last column. ``style`` picks the frequencies:

    - ``fairseq`` (``SinusoidalPositionalEmbedding.get_embedding``; also CTranslate2 and M2M-100):
      ``freq_i = exp(-log(10000) * i / (D/2 - 1))``, computed in float32.
    - ``marian`` (Marian and transformers' ``MarianSinusoidalPositionalEmbedding``): ``freq_i = 10000^(-2i/D)``,
      the paper's frequencies (section 3.5), computed in float64 and rounded once, as transformers does.

    The paper interleaves sin/cos: the same functions with the columns permuted, which a model trained from
    scratch cannot tell; an imported model needs its own.
    """
    if style not in SINUSOIDS:
        raise ValueError(f"sinusoid must be one of {SINUSOIDS}, got {style!r}")
    half = d_model // 2
    i = torch.arange(half, dtype=torch.float32 if style == "fairseq" else torch.float64, device=positions.device)
    if style == "fairseq":
        freq = torch.exp(i * -(math.log(10000.0) / (half - 1)))
    else:
        freq = 1.0 / torch.pow(10000.0, 2 * i / d_model)
    angles = positions.to(freq.dtype)[:, None] * freq[None, :]  # (len, D/2)
    table = torch.cat([torch.sin(angles), torch.cos(angles)], dim=1).to(torch.float32)  # (len, 2 * (D/2))
    if d_model % 2 == 1:
        table = torch.cat([table, table.new_zeros(len(positions), 1)], dim=1)
    return table


def row_positions(start: Tensor, length: int) -> Tensor:
    """Positions (B, T) of ``length`` steps from each row's own ``start`` (B,)."""
    return start.unsqueeze(1) + torch.arange(length, device=start.device)


class SinusoidalPositions(nn.Module):
    """Fixed sinusoidal positional encodings (section 3.5), no parameters.

    Positions start at 0 for the first token (BOS on the target side), encoded as ``p + offset``
    (``model.position_offset``). fairseq, M2M-100 and NLLB number them from ``padding_idx + 1`` (offset 2)
    and give pads a zero vector; we do not need that because sequences are right-padded, so a real
    token's position never depends on the padding (pads' outputs are ignored). A table for
    ``max_positions`` is precomputed as a non-persistent buffer, row ``p`` the encoding of position ``p``
    (``p + offset``: the C++ step reads the table as it is); longer inputs are computed on the fly, so
    there is no hard length limit.
    """

    def __init__(self, d_model: int, max_positions: int, style: str = "fairseq", offset: int = 0) -> None:
        super().__init__()
        self.d_model = d_model
        self.style = style
        self.offset = offset
        table = sinusoid_table(torch.arange(offset, offset + max_positions), d_model, style)
        self.register_buffer("table", table, persistent=False)

    def forward(self, start: int | Tensor, length: int) -> Tensor:
        """Encodings (T, D) of positions ``start .. start + length - 1``; for a per-row ``start`` (B,),
        (B, T, D) (a ragged decoding batch, ``mt.model.cache``)."""
        table: Tensor = self.table  # type: ignore[assignment]
        if isinstance(start, Tensor):
            return table[row_positions(start, length)]  # (B, T, D); decoding stays below max_positions
        if start + length <= table.size(0):
            return table[start : start + length]
        positions = torch.arange(start + self.offset, start + self.offset + length, device=table.device)
        return sinusoid_table(positions, self.d_model, self.style).to(table.dtype)


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
    positions, ``mt.model.rope``, live in the self-attention instead). ``scale=False`` leaves out the
    sqrt(D) factor (a model imported from a family that has none).
    """

    def __init__(
        self,
        token: nn.Embedding,
        positions: SinusoidalPositions | LearnedPositions | None,
        *,
        dropout: float,
        scale: bool = True,
    ) -> None:
        super().__init__()
        self.token = token
        self.positions = positions
        self.scale = math.sqrt(token.embedding_dim) if scale else 1.0
        self.dropout = Dropout(dropout)

    def forward(self, tokens: Tensor, start: int | Tensor = 0) -> Tensor:
        """tokens (B, T) at positions ``start ..`` (an int, or (B,): each row's own) -> (B, T, D)."""
        x = self.token(tokens) * self.scale  # (B, T, D)
        if self.positions is not None:
            x = x + self.positions(start, tokens.size(1)).to(x.dtype)  # (T, D) or (B, T, D)
        return self.dropout(x)
