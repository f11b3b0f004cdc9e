"""The Transformer encoder-decoder: ``build_model`` and what decoding needs (see docs/ARCHITECTURE.md)."""

from mt.model.attention import MultiHeadAttention, attention, causal_mask
from mt.model.cache import DecoderCache, EncoderOut, LayerCache
from mt.model.decoder import Decoder
from mt.model.embedding import LearnedPositions, SinusoidalPositions, TransformerEmbedding, sinusoid_table
from mt.model.encoder import Encoder
from mt.model.layers import DecoderLayer, EncoderLayer, FeedForward, Residual
from mt.model.seq2seq import Seq2SeqTransformer, build_model

__all__ = [
    "Decoder",
    "DecoderCache",
    "DecoderLayer",
    "Encoder",
    "EncoderLayer",
    "EncoderOut",
    "FeedForward",
    "LayerCache",
    "LearnedPositions",
    "MultiHeadAttention",
    "Residual",
    "Seq2SeqTransformer",
    "SinusoidalPositions",
    "TransformerEmbedding",
    "attention",
    "build_model",
    "causal_mask",
    "sinusoid_table",
]
