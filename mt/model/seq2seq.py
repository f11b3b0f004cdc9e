"""The Transformer encoder-decoder (Vaswani et al. 2017) and its builder."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from torch import Tensor, nn

from mt.config import ModelConfig
from mt.model.beam_cache import BeamCache
from mt.model.cache import DecoderCache, DecodingState, EncoderOut
from mt.model.decoder import Decoder
from mt.model.embedding import LearnedPositions, SinusoidalPositions, TransformerEmbedding, token_embedding
from mt.model.encoder import Encoder
from mt.model.layers import DecoderLayer, EncoderLayer
from mt.model.norms import make_norm
from mt.model.rope import RotaryEmbedding


class Seq2SeqTransformer(nn.Module):
    """Encode once, decode many: what training (``forward``) and search (``encode``/``decode``) need.

    Shapes: src (B, S), src_pad_mask (B, S) True = padding, tgt_in (B, T) = [BOS] + pieces,
    logits (B, T, V) in the model's dtype. ``on_encoded`` (when set) hears of each ``encode``'s sources and
    output: how decoding hands encoder outputs to the word aligner (``mt.decode.align.EncoderRows``).
    """

    def __init__(self, encoder: Encoder, decoder: Decoder) -> None:
        super().__init__()
        self.encoder = encoder
        self.decoder = decoder
        self.on_encoded: Callable[[Tensor, EncoderOut], None] | None = None

    def encode(self, src: Tensor, src_pad_mask: Tensor) -> EncoderOut:
        enc = EncoderOut(out=self.encoder(src, src_pad_mask), pad_mask=src_pad_mask)
        if self.on_encoded is not None:
            self.on_encoded(src, enc)
        return enc

    def decode(self, tgt_in: Tensor, enc: EncoderOut, cache: DecodingState | None = None) -> Tensor:
        """Logits (B, T, V) for ``tgt_in``; see ``Decoder.forward`` for the cached, incremental case.

        With a cache, the first call projects the encoder-decoder K/V from ``enc`` and keeps its pad
        mask; later calls check ``enc``'s rows against the cache but read nothing else from it.
        """
        return self.decoder(tgt_in, enc, cache)

    def join(self, enc: EncoderOut, cache: DecoderCache | BeamCache, new: EncoderOut) -> None:
        """Add sentences to a decoding in progress (continuous batching): their encoder output ``new``
        (``encode``) is appended to ``enc``, and to ``cache`` their rows at step 0 (one per sentence, or
        the beams of each in a ``BeamCache``), which the next ``decode`` feeds with BOS."""
        cache.add_sentences(self.decoder.source_keys(new.out), new.pad_mask)
        enc.extend(new)

    def native_greedy(self, enc: EncoderOut, *args: Any) -> tuple[list[list[int]], list[float]] | None:
        """Greedy search of ``enc``'s sentences with every step in C++ (``mt.model.native.NativeSteps.greedy``,
        which names ``args``): each one's pieces and summed log-prob, or None where the C++ code does not take
        it (``mt.decode.greedy`` then runs its own loop)."""
        native = self.decoder.native
        return None if native is None else native.greedy(self.decoder, enc, *args)

    def native_beam(self, enc: EncoderOut, *args: Any) -> list[list[tuple[list[int], float]]] | None:
        """Beam search of ``enc``'s sentences with every step in C++ (``mt.model.native.NativeSteps.beam``, which
        names ``args``): each one's finished hypotheses, or None where the C++ code does not take it
        (``mt.decode.beam`` then runs its own loop)."""
        native = self.decoder.native
        return None if native is None else native.beam(self.decoder, enc, *args)

    def forward(self, src: Tensor, src_pad_mask: Tensor, tgt_in: Tensor, project_output: bool = True) -> Tensor:
        """Teacher-forced logits (B, T, V); with ``project_output=False`` the decoder's last hidden states
        (B, T, D), which training's loss projects onto ``decoder.output_weight`` itself."""
        return self.decoder(tgt_in, self.encode(src, src_pad_mask), project_output=project_output)

    def new_cache(self, beams_per_sentence: int | None = None) -> DecoderCache | BeamCache:
        """An empty cache for incremental ``decode``: a plain ``DecoderCache`` (one source row per decoder
        row), or with ``beams_per_sentence`` a ``BeamCache`` for beam search (see mt.model.beam_cache)."""
        if beams_per_sentence is None:
            return self.decoder.new_cache()
        return BeamCache(len(self.decoder.layers), beams_per_sentence, self.decoder.row_mover)

    def cross_attention_weights(
        self, src: Tensor, src_pad_mask: Tensor, tgt_in: Tensor, layer: int = -1
    ) -> Tensor:
        """Head-averaged encoder-decoder attention (B, T, S) of decoder layer ``layer`` (alignment plots)."""
        enc = self.encode(src, src_pad_mask)
        return self.decoder.cross_attention_weights(tgt_in, enc.out, enc.pad_mask, layer).mean(dim=1)


def build_model(cfg: ModelConfig, src_vocab: int, tgt_vocab: int, pad_id: int = 0) -> Seq2SeqTransformer:
    """Build and initialise the model described by ``cfg``.

    Weight tying (section 3.4; Press & Wolf 2017): the decoder's input embedding is the output projection
    (unless ``cfg.tie_output=false``: a matrix of its own, initialised as the embeddings are); with
    ``cfg.share_all_embeddings`` the encoder's embedding is the same matrix too, which needs one joint
    vocabulary (``src_vocab == tgt_vocab``). Initialisation follows fairseq: embeddings N(0, D^-0.5) with a
    zero pad row, Xavier-uniform projections, zero biases, LayerNorm (1, 0).
    """
    if cfg.share_all_embeddings and src_vocab != tgt_vocab:
        raise ValueError(
            f"share_all_embeddings needs a joint vocabulary: src_vocab={src_vocab} != tgt_vocab={tgt_vocab}"
        )
    tgt_token = token_embedding(tgt_vocab, cfg.d_model, pad_id)
    src_token = tgt_token if cfg.share_all_embeddings else token_embedding(src_vocab, cfg.d_model, pad_id)

    def embedding(token: nn.Embedding) -> TransformerEmbedding:
        return TransformerEmbedding(
            token, absolute_positions(cfg), dropout=cfg.dropout, scale=cfg.scale_embeddings
        )

    rope = RotaryEmbedding(cfg.d_model // cfg.heads, cfg.max_positions) if cfg.positions == "rope" else None

    layer_kwargs: dict[str, Any] = dict(
        d_model=cfg.d_model,
        heads=cfg.heads,
        d_ff=cfg.d_ff,
        dropout=cfg.dropout,
        attention_dropout=cfg.attention_dropout,
        activation=cfg.activation,
        activation_dropout=cfg.activation_dropout,
        pre_ln=cfg.pre_ln,
        norm=cfg.norm,
        swiglu_hidden=cfg.swiglu_hidden,
        kv_heads=cfg.kv_heads,
        qk_norm=cfg.qk_norm,
        rope=rope,
    )

    def final_norm() -> nn.Module | None:  # Pre-LN leaves the residual stream unnormalised
        return make_norm(cfg.norm, cfg.d_model) if cfg.pre_ln else None

    encoder = Encoder(
        embedding(src_token), [EncoderLayer(**layer_kwargs) for _ in range(cfg.encoder_layers)], final_norm()
    )
    decoder = Decoder(
        embedding(tgt_token),
        [DecoderLayer(**layer_kwargs) for _ in range(cfg.decoder_layers)],
        final_norm(),
        logits_bias=cfg.logits_bias,
        tie_output=cfg.tie_output,
    )
    return Seq2SeqTransformer(encoder, decoder)


def absolute_positions(cfg: ModelConfig) -> SinusoidalPositions | LearnedPositions | None:
    """The positional encoding added to the embeddings (None for rotary positions, in the attention)."""
    if cfg.positions == "sinusoidal":
        return SinusoidalPositions(cfg.d_model, cfg.max_positions, cfg.sinusoid, cfg.position_offset)
    if cfg.positions == "learned":
        return LearnedPositions(cfg.d_model, cfg.max_positions)
    if cfg.positions == "rope":
        return None
    raise ValueError(f"positions must be sinusoidal | learned | rope, got {cfg.positions!r}")


def modern_options(cfg: ModelConfig) -> list[str]:
    """The options of ``cfg`` beyond the paper's Transformer that change its layers' structure, as
    overrides (``["model.norm=rmsnorm", "model.positions=rope", ...]``; empty for the paper's model,
    including Pre-LN, GELU and learned positions); exporters refuse those they cannot represent.
    ``model.activation=swiglu`` is listed too."""
    found = [f"model.norm={cfg.norm}"] if cfg.norm != "layernorm" else []
    found += [f"model.activation={cfg.activation}"] if cfg.activation == "swiglu" else []
    found += ["model.positions=rope"] if cfg.positions == "rope" else []
    found += [f"model.kv_heads={cfg.kv_heads}"] if cfg.kv_heads not in (0, cfg.heads) else []
    found += ["model.qk_norm=true"] if cfg.qk_norm else []
    return found
