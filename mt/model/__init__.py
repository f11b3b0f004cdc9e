"""The Transformer encoder-decoder: ``build_model`` and what decoding needs (see docs/ARCHITECTURE.md)."""

from mt.model.attention import CachedKeys, attention, causal_mask, grouped_attention
from mt.model.beam_cache import BeamCache
from mt.model.cache import DecoderCache, DecodingState, EncoderOut, KVBuffer, LayerKV
from mt.model.decoder import Decoder
from mt.model.embedding import LearnedPositions, SinusoidalPositions, TransformerEmbedding, sinusoid_table
from mt.model.encoder import Encoder
from mt.model.ensemble import Ensemble, EnsembleState
from mt.model.layers import DecoderLayer, EncoderLayer, FeedForward, Residual
from mt.model.multihead import MultiHeadAttention
from mt.model.packed_linear import PackedLinear, bf16_supported, int8_supported, pack_linears_, packing_supported
from mt.model.rope import RotaryEmbedding
from mt.model.seq2seq import Seq2SeqTransformer, build_model, modern_options

__all__ = [
    "BeamCache",
    "CachedKeys",
    "Decoder",
    "DecoderCache",
    "DecoderLayer",
    "DecodingState",
    "Encoder",
    "EncoderLayer",
    "EncoderOut",
    "Ensemble",
    "EnsembleState",
    "FeedForward",
    "KVBuffer",
    "LayerKV",
    "LearnedPositions",
    "MultiHeadAttention",
    "PackedLinear",
    "Residual",
    "RotaryEmbedding",
    "Seq2SeqTransformer",
    "SinusoidalPositions",
    "TransformerEmbedding",
    "attention",
    "bf16_supported",
    "int8_supported",
    "build_model",
    "causal_mask",
    "grouped_attention",
    "modern_options",
    "pack_linears_",
    "packing_supported",
    "sinusoid_table",
]
