"""The decoder stack and output projection (Vaswani et al. 2017, sections 3.1 and 3.4)."""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from mt.model.cache import DecoderCache, DecodingState, EncoderOut, RowMover
from mt.model.embedding import TransformerEmbedding
from mt.model.layers import DecoderLayer
from mt.model.native import NativeSteps, build_native
from mt.model.packed_linear import Packed, pack_weight, packed_linear


class Decoder(nn.Module):
    """Embedding, N ``DecoderLayer``s, a final norm for Pre-LN, and the output projection.

    The output projection (section 3.4) is ``logits = h @ W^T`` with ``W`` the target embedding matrix
    (V, D) itself: input and output embeddings are tied, so there is no separate parameter (and no duplicate
    entry in the state dict). ``tie_output=False`` gives the projection a matrix of its own
    (``output_projection``, initialised as the embedding is): what an imported model with an untied
    ``lm_head`` needs. ``logits_bias=True`` adds a fixed bias (V,) to the logits, a buffer
    that training leaves as it is (an imported model's ``final_logits_bias``; ``-inf`` on the rows that model
    has no output for, so they take no probability).
    """

    def __init__(
        self,
        embedding: TransformerEmbedding,
        layers: list[DecoderLayer],
        final_norm: nn.Module | None,
        *,
        logits_bias: bool = False,
        tie_output: bool = True,
    ) -> None:
        super().__init__()
        self.embedding = embedding
        self.output_projection: nn.Parameter | None = None
        if not tie_output:
            token = embedding.token.weight  # (V, D)
            self.output_projection = nn.Parameter(torch.randn_like(token) * token.shape[1] ** -0.5)
        self.logits_bias: Tensor | None
        bias = torch.zeros(embedding.token.num_embeddings) if logits_bias else None
        self.register_buffer("logits_bias", bias)  # (V,) or None
        self.layers = nn.ModuleList(layers)
        self.final_norm = final_norm
        # cached decoding in eval mode runs ``DecoderLayer.step`` (the same ops, fewer Python calls);
        # False runs the modules' ``forward`` instead (the plain path the tests compare it with)
        self.fast_steps = True
        self.output_packed: Packed | None = None  # ``pack_output``: the projection packed for inference
        self.native: NativeSteps | None = None  # ``use_native``: one-token cached steps in C++

    def use_native(self) -> str | None:
        """Run cached one-token steps in C++ (``mt.model.native``) from now on, in eval mode. Returns why
        not (and leaves the Python step) when the C++ step does not cover this model or cannot be built."""
        made = build_native(self, NativeSteps)
        if isinstance(made, str):
            return made
        self.native = made  # type: ignore[assignment]
        return None

    def pack_output(self, dtype: torch.dtype = torch.float32) -> None:
        """Pack the output projection as ``dtype`` for CPU inference (``mt.model.packed_linear``); eval mode only."""
        self.output_packed = pack_weight(self.output_weight, dtype)

    def project(self, x: Tensor) -> Tensor:
        """The output projection: hidden states (..., D) -> logits (..., V)."""
        bias = self.logits_bias
        if self.output_packed is not None and not self.training and x.dtype == torch.float32:
            logits = packed_linear(x, self.output_packed, None)  # (..., V)
            return logits if bias is None else logits + bias
        return F.linear(x, self.output_weight, None if bias is None else bias.to(x.dtype))

    @property
    def output_weight(self) -> nn.Parameter:
        """The output projection (V, D): the target token embedding, or its own matrix when untied."""
        return self.embedding.token.weight if self.output_projection is None else self.output_projection

    @property
    def row_mover(self) -> RowMover | None:
        """The C++ step's row mover for this decoder's caches (None: the Python moves)."""
        return self.native.move_rows if self.native is not None else None

    def new_cache(self) -> DecoderCache:
        return DecoderCache(len(self.layers), self.row_mover)

    def source_keys(self, memory: Tensor) -> list[tuple[Tensor, Tensor]]:
        """Every layer's encoder-decoder keys and values (B, Hkv, S, Dh) of ``memory`` (B, S, D), for
        sentences that join a decoding state in progress (``DecoderCache.add_sentences``)."""
        return [
            tuple(t.contiguous() for t in layer.cross_attn.project_memory(memory))  # type: ignore[misc]
            for layer in self.layers
        ]

    def forward(
        self, tgt_in: Tensor, enc: EncoderOut, cache: DecodingState | None = None, project_output: bool = True
    ) -> Tensor:
        """tgt_in (B, T); enc: out (B, S, D), pad_mask (B, S), True = padding -> logits (B, T, V).

        Without a cache: the full causal forward. With one: ``tgt_in`` holds the new tokens only, their
        positions continue from ``cache.length`` and every layer extends its cache (``mt.model.cache``).
        ``project_output=False`` returns the last hidden states (B, T, D) instead of the logits: training
        projects them inside its loss (``mt.train.loss.output_loss``), never holding (B, T, V) whole.
        """
        start = 0 if cache is None else cache.positions  # an int, or (B,) in a ragged batch
        x = self.embedding(tgt_in, start)  # (B, T, D)
        if cache is None:
            mask = ~enc.pad_mask[:, None, None, :]  # (B, 1, 1, S), True = may attend
            for layer in self.layers:
                x = layer(x, enc.out, mask)
        else:
            steps = cache.start_call(tgt_in.size(0), tgt_in.size(1), enc, x.dtype)  # masks built once per call
            fast = self.fast_steps and not self.training
            if fast and self.native is not None and self.native.takes(x, steps):
                x = self.native(x, steps)
            else:
                for layer, step in zip(self.layers, steps, strict=True):
                    x = layer.step(x, enc.out, step, start) if fast else layer(x, enc.out, None, step, start)
        if self.final_norm is not None:
            x = self.final_norm(x)
        return self.project(x) if project_output else x  # (B, T, V) or (B, T, D)

    def cross_attention_weights(
        self, tgt_in: Tensor, memory: Tensor, memory_pad_mask: Tensor, layer: int = -1
    ) -> Tensor:
        """Encoder-decoder attention weights (B, H, T, S) of decoder layer ``layer`` (reference path)."""
        index = range(len(self.layers))[layer]  # normalises negative indices, raises IndexError
        mask = ~memory_pad_mask[:, None, None, :]  # (B, 1, 1, S)
        x = self.embedding(tgt_in)  # (B, T, D)
        for block in self.layers[:index]:
            x = block(x, memory, mask)
        return self.layers[index].cross_attention_weights(x, memory, mask)
