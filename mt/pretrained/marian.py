"""A ``MarianMTModel`` directory (OPUS-MT, or mt's own ``mt-export --to hf``) as an mt checkpoint.

Marian is mt's architecture with a few options of its own, each an mt config option here: the SiLU
("swish") feed-forward (``model.activation=silu``), its sinusoid frequencies (``model.sinusoid=marian``;
a directory that stores another table keeps it: fairseq's frequencies, or learned positions), and
``final_logits_bias`` (``model.logits_bias``). Decoding starts from ``<pad>``, which mt's ``<s>`` copies
(``mt.pretrained.vocab``). Tokenization is Marian's: ``source.spm`` / ``target.spm`` cut pieces,
``vocab.json`` (``target_vocab.json`` for separate vocabularies) numbers them (``VocabTokenizer``).
"""

from __future__ import annotations

import dataclasses
from typing import Any

import torch
from torch import Tensor

from mt.config import ModelConfig
from mt.data import Tokenizers
from mt.data.vocab_tokenizer import VocabTokenizer
from mt.model import sinusoid_table
from mt.pretrained.files import HFDirectory, PretrainedError
from mt.pretrained.vocab import Reordered, reorder
from mt.pretrained.weights import Weights, in_mt_order, stack_weights

ACTIVATIONS = {"swish": "silu", "silu": "silu", "relu": "relu", "gelu": "gelu"}  # transformers' name -> mt's


def refuse(origin: str, field: str, value: Any, why: str) -> PretrainedError:
    return PretrainedError(f"{origin}: config.json {field}={value!r}: {why}")


# what transformers' MarianConfig gives a field that config.json leaves out
MARIAN_DEFAULTS = {
    "encoder_layers": 12, "decoder_layers": 12, "d_model": 1024, "encoder_attention_heads": 8,
    "decoder_attention_heads": 8, "encoder_ffn_dim": 2048, "decoder_ffn_dim": 2048, "activation_function": "gelu",
    "dropout": 0.1, "attention_dropout": 0.0, "activation_dropout": 0.0, "max_position_embeddings": 1024,
}


def layer_options(config: dict[str, Any], origin: str, defaults: dict[str, Any]) -> dict[str, Any]:
    """The ``model`` options of a Bart-family ``config.json`` (Marian, M2M-100: the layers' shapes, dropouts,
    activation, positions), ``defaults`` for the fields it leaves out; what mt cannot represent is refused by field."""

    def get(field: str) -> Any:
        return config.get(field, defaults[field])

    heads, d_ff = get("encoder_attention_heads"), get("encoder_ffn_dim")
    if get("decoder_attention_heads") != heads:
        raise refuse(origin, "decoder_attention_heads", get("decoder_attention_heads"),
                     f"differs from encoder_attention_heads={heads}; mt has one model.heads")
    if get("decoder_ffn_dim") != d_ff:
        raise refuse(origin, "decoder_ffn_dim", get("decoder_ffn_dim"),
                     f"differs from encoder_ffn_dim={d_ff}; mt has one model.d_ff")
    activation = get("activation_function")
    if activation not in ACTIVATIONS:
        raise refuse(origin, "activation_function", activation, f"mt has {', '.join(sorted(ACTIVATIONS))}")
    d_model = get("d_model")
    if d_model % heads:
        raise refuse(origin, "d_model", d_model, f"not a multiple of encoder_attention_heads={heads}")
    return dict(
        encoder_layers=get("encoder_layers"), decoder_layers=get("decoder_layers"), d_model=d_model, d_ff=d_ff,
        heads=heads, dropout=get("dropout"), attention_dropout=get("attention_dropout"),
        activation_dropout=get("activation_dropout"), activation=ACTIVATIONS[activation],
        max_positions=get("max_position_embeddings"),
    )


def model_config(config: dict[str, Any], origin: str) -> ModelConfig:
    """mt's ``model`` group for a Marian ``config.json``; what mt cannot represent is refused by field."""
    return ModelConfig(
        name="marian",
        **layer_options(config, origin, MARIAN_DEFAULTS),
        scale_embeddings=bool(config.get("scale_embedding", False)),
        share_all_embeddings=bool(config.get("share_encoder_decoder_embeddings", True)),
        tie_output=bool(config.get("tie_word_embeddings", True)),
    )


def vocabularies(directory: HFDirectory, config: dict[str, Any]) -> tuple[Tokenizers, Reordered, Reordered]:
    """The source and target ``VocabTokenizer`` in mt's id order, and each side's reordering of the rows."""
    tokenizer_config = directory.json("tokenizer_config.json")
    separate = bool(tokenizer_config.get("separate_vocabs", False))
    origin = str(directory.path)
    if separate and config.get("share_encoder_decoder_embeddings", True):
        raise refuse(origin, "share_encoder_decoder_embeddings", True,
                     "one embedding cannot serve the separate vocabularies of tokenizer_config.json")
    src_pieces = pieces_of(directory, "vocab.json")
    tgt_pieces = pieces_of(directory, "target_vocab.json") if separate else src_pieces
    shared = bool(config.get("share_encoder_decoder_embeddings", True))
    src_rows = config.get("vocab_size", len(src_pieces))
    tgt_rows = src_rows if shared else config.get("decoder_vocab_size") or src_rows
    ids = dict(pad=config.get("pad_token_id", 0), unk=unk_id(src_pieces, origin), eos=config.get("eos_token_id", 0),
               start=config.get("decoder_start_token_id", config.get("pad_token_id", 0)), origin=origin)
    src_order = reorder(src_pieces, src_rows, **ids)
    tgt_order = reorder(tgt_pieces, tgt_rows, **(ids | {"unk": unk_id(tgt_pieces, origin)}))
    src = VocabTokenizer(directory.file("source.spm").read_bytes(), src_order.pieces, len(src_order.order))
    tgt = VocabTokenizer(directory.file("target.spm").read_bytes(), tgt_order.pieces, len(tgt_order.order))
    return Tokenizers(src, tgt, joint=False), src_order, tgt_order


def pieces_of(directory: HFDirectory, name: str) -> list[str]:
    """A Marian vocabulary file (piece -> id) as the list id -> piece; its ids must be 0 .. n-1."""
    vocab = directory.json(name)
    if not vocab:
        raise PretrainedError(f"{directory.path} has no {name} (MarianTokenizer's piece -> id vocabulary)")
    pieces = sorted(vocab, key=vocab.__getitem__)
    if sorted(vocab.values()) != list(range(len(vocab))):
        raise PretrainedError(f"{directory.path / name}: ids are not 0 .. {len(vocab) - 1}, each once")
    return pieces


def unk_id(pieces: list[str], origin: str) -> int:
    if "<unk>" not in pieces:
        raise PretrainedError(f"{origin}: the vocabulary has no <unk>")
    return pieces.index("<unk>")


def positions(weights: Weights, cfg: ModelConfig) -> tuple[ModelConfig, dict[str, Tensor]]:
    """The positional encoding the directory holds: Marian's sinusoids when it stores none (transformers makes
    them), else whichever formula its tables match, else its tables as learned positions."""
    names = {side: f"model.{side}.embed_positions.weight" for side in ("encoder", "decoder")}
    if not all(weights.has(name) for name in names.values()):
        return dataclasses.replace(cfg, sinusoid="marian"), {}
    tables = {side: weights.take(name) for side, name in names.items()}
    rows = torch.arange(cfg.max_positions)
    for style in ("marian", "fairseq"):
        expected = sinusoid_table(rows, cfg.d_model, style)
        if all(t.shape == expected.shape and torch.allclose(t, expected, atol=1e-6) for t in tables.values()):
            return dataclasses.replace(cfg, sinusoid=style), {}
    learned = {f"{side}.embedding.positions.embedding.weight": t.clone() for side, t in tables.items()}
    return dataclasses.replace(cfg, positions="learned"), learned


def embeddings(weights: Weights, cfg: ModelConfig, src: Reordered, tgt: Reordered, origin: str) -> dict[str, Tensor]:
    """Token embeddings in mt's row order, and the output projection when it is not the target embedding
    (``tie_word_embeddings=false``: ``lm_head``; tied, transformers itself replaces a stored ``lm_head``)."""
    shared = "model.shared.weight" if weights.has("model.shared.weight") else "model.encoder.embed_tokens.weight"
    if cfg.share_all_embeddings:
        src_rows = tgt_rows = weights.take(shared)
        for alias in ("model.encoder.embed_tokens.weight", "model.decoder.embed_tokens.weight"):
            if weights.has(alias):
                same_as_shared(weights, alias, src_rows, origin)
    else:
        src_rows = weights.take("model.encoder.embed_tokens.weight")
        tgt_rows = weights.take("model.decoder.embed_tokens.weight")
    out = {"decoder.embedding.token.weight": in_mt_order(tgt_rows, tgt.order)}
    if not cfg.tie_output:
        out["decoder.output_projection"] = in_mt_order(weights.take("lm_head.weight"), tgt.order)
    elif weights.has("lm_head.weight"):
        weights.take("lm_head.weight")
    if not cfg.share_all_embeddings:
        out["encoder.embedding.token.weight"] = in_mt_order(src_rows, src.order)
    return out


def same_as_shared(weights: Weights, name: str, expected: Tensor, origin: str, what: str = "") -> None:
    if not torch.equal(weights.take(name), expected):
        raise PretrainedError(f"{origin}: {name} differs from the embedding it should share; mt cannot represent "
                              f"{what or 'untied embeddings there'}")


def logits_bias(weights: Weights, tgt: Reordered) -> Tensor | None:
    """``final_logits_bias`` in mt's order with ``-inf`` on the masked ids; None when it is all zero and nothing
    is masked (the model then needs no bias)."""
    rows = len(tgt.order) - len(tgt.masked)  # the source model's rows
    found = weights.take("final_logits_bias").reshape(-1) if weights.has("final_logits_bias") else None
    bias = torch.zeros(rows) if found is None else found
    if not tgt.masked and not bool(bias.any()):
        return None
    out = in_mt_order(bias, tgt.order)
    out[tgt.masked] = float("-inf")
    return out


def import_marian(directory: HFDirectory) -> tuple[ModelConfig, dict[str, Tensor], Tokenizers]:
    """mt's model config, weights (mt's names) and tokenizers of a MarianMTModel directory."""
    origin = str(directory.path)
    cfg = model_config(directory.config, origin)
    tokenizers, src_order, tgt_order = vocabularies(directory, directory.config)
    weights = Weights(directory.weights(), origin)
    cfg, state = positions(weights, cfg)
    state |= embeddings(weights, cfg, src_order, tgt_order, origin)
    return (*bias_and_layers(weights, cfg, state, tgt_order), tokenizers)


def bias_and_layers(weights: Weights, cfg: ModelConfig, state: dict[str, Tensor],
                    tgt: Reordered) -> tuple[ModelConfig, dict[str, Tensor]]:
    """``cfg`` and ``state`` with the logits bias (when the model needs one) and every layer's weights; the
    Bart-family layout of Marian and M2M-100 alike. Refuses weights left without a place."""
    if (bias := logits_bias(weights, tgt)) is not None:
        cfg = dataclasses.replace(cfg, logits_bias=True)
        state["decoder.logits_bias"] = bias
    state |= stack_weights(weights, "model.encoder", "encoder", cfg.encoder_layers, decoder=False)
    state |= stack_weights(weights, "model.decoder", "decoder", cfg.decoder_layers, decoder=True)
    weights.refuse_unused()
    return cfg, state
