"""The encoder stack (Vaswani et al. 2017, section 3.1)."""

from __future__ import annotations

from torch import Tensor, nn

from mt.model.embedding import TransformerEmbedding
from mt.model.layers import EncoderLayer
from mt.model.native import NativeEncoder, build_native


class Encoder(nn.Module):
    """Embedding, N ``EncoderLayer``s and, for Pre-LN, a final norm (``final_norm=None`` for Post-LN)."""

    def __init__(
        self, embedding: TransformerEmbedding, layers: list[EncoderLayer], final_norm: nn.Module | None
    ) -> None:
        super().__init__()
        self.embedding = embedding
        self.layers = nn.ModuleList(layers)
        self.final_norm = final_norm
        self.native: NativeEncoder | None = None  # ``use_native``: the layers in C++ at inference

    def use_native(self) -> str | None:
        """Run the layers in C++ (``mt.model.native``) at inference from now on, in eval mode. Returns why not
        (and leaves the Python layers) when the C++ code does not cover this model or cannot be built."""
        made = build_native(self, NativeEncoder)
        if isinstance(made, str):
            return made
        self.native = made  # type: ignore[assignment]
        return None

    def forward(self, src: Tensor, src_pad_mask: Tensor) -> Tensor:
        """src (B, S) token ids; src_pad_mask (B, S), True = padding -> (B, S, D)."""
        x = self.embedding(src)  # (B, S, D)
        if self.native is not None and not self.training and self.native.takes(x):
            x = self.native(x, src_pad_mask)
        else:
            mask = ~src_pad_mask[:, None, None, :]  # (B, 1, 1, S), True = may attend
            for layer in self.layers:
                x = layer(x, mask)
        return x if self.final_norm is None else self.final_norm(x)
