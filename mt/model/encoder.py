"""The encoder stack (Vaswani et al. 2017, section 3.1)."""

from __future__ import annotations

from torch import Tensor, nn

from mt.model.embedding import TransformerEmbedding
from mt.model.layers import EncoderLayer


class Encoder(nn.Module):
    """Embedding, N ``EncoderLayer``s and, for Pre-LN, a final norm (``final_norm=None`` for Post-LN)."""

    def __init__(
        self, embedding: TransformerEmbedding, layers: list[EncoderLayer], final_norm: nn.Module | None
    ) -> None:
        super().__init__()
        self.embedding = embedding
        self.layers = nn.ModuleList(layers)
        self.final_norm = final_norm

    def forward(self, src: Tensor, src_pad_mask: Tensor) -> Tensor:
        """src (B, S) token ids; src_pad_mask (B, S), True = padding -> (B, S, D)."""
        mask = ~src_pad_mask[:, None, None, :]  # (B, 1, 1, S), True = may attend
        x = self.embedding(src)  # (B, S, D)
        for layer in self.layers:
            x = layer(x, mask)
        return x if self.final_norm is None else self.final_norm(x)
