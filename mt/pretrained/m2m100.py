"""An ``M2M100ForConditionalGeneration`` directory (M2M-100, NLLB-200) as an mt checkpoint.

M2M-100 is mt's architecture with options of its own, each an mt config option here: Pre-LN layers with a final
norm after each stack (``model.pre_ln``; ``model.encoder.layer_norm`` / ``model.decoder.layer_norm`` are mt's
``final_norm``), fairseq's sinusoids counted from ``padding_idx + 1`` (``model.sinusoid=fairseq``,
``model.position_offset=2``), scaled embeddings that the encoder, the decoder and the output share. Its
vocabulary is fairseq's (``<s> <pad> </s> <unk>`` first, then the pieces, then one code a language); decoding
starts from ``</s>``, which mt's ``<s>`` copies, and fairseq's own ``<s>`` stays an ordinary row named ``<s:0>``
(``mt.pretrained.vocab``). A source is ``[its language's code] + pieces + [</s>]``, and the first generated token
is forced to the target language's code (``VocabTokenizer.language_codes``, ``mt.decode``'s ``forced``).

Tokenization: SentencePiece (``sentencepiece.bpe.model``) cuts the pieces; NLLB's ``tokenizer.json`` numbers them
(its model's vocabulary and its added tokens: the language codes, ``<mask>``), or M2M-100's ``vocab.json`` with
the language codes numbered after it as ``M2M100Tokenizer`` numbers them (``tokenizer_config.json``'s
``language_codes``).
"""

from __future__ import annotations

from typing import Any

import torch
from torch import Tensor

from mt.config import ModelConfig
from mt.data import Tokenizers
from mt.data.vocab_tokenizer import VocabTokenizer
from mt.model import sinusoid_table
from mt.pretrained.files import HFDirectory, PretrainedError
from mt.pretrained.marian import bias_and_layers, embeddings, layer_options, refuse, unk_id
from mt.pretrained.vocab import Reordered, reorder
from mt.pretrained.weights import Weights

POSITION_OFFSET = 2  # fairseq numbers positions from padding_idx + 1 (M2M100SinusoidalPositionalEmbedding)
# what transformers' M2M100Config gives a field that config.json leaves out
M2M100_DEFAULTS = {
    "encoder_layers": 12, "decoder_layers": 12, "d_model": 1024, "encoder_attention_heads": 16,
    "decoder_attention_heads": 16, "encoder_ffn_dim": 4096, "decoder_ffn_dim": 4096, "activation_function": "relu",
    "dropout": 0.1, "attention_dropout": 0.1, "activation_dropout": 0.0, "max_position_embeddings": 1024,
}
MOE_FIELDS = ("num_experts", "expert_capacity", "encoder_sparse_step", "decoder_sparse_step")  # NLLB-MoE's
FINAL_NORMS = {"encoder.final_norm": "model.encoder.layer_norm", "decoder.final_norm": "model.decoder.layer_norm"}
# M2M100Tokenizer's language codes (tokenizer_config.json's language_codes), numbered after vocab.json in this order
M2M100_LANGUAGES = {
    "m2m100": (
        "af am ar ast az ba be bg bn br bs ca ceb cs cy da de el en es et fa ff fi fr fy ga gd gl gu ha he hi hr ht "
        "hu hy id ig ilo is it ja jv ka kk km kn ko lb lg ln lo lt lv mg mk ml mn mr ms my ne nl no ns oc or pa pl ps "
        "pt ro ru sd si sk sl so sq sr ss su sv sw ta th tl tn tr uk ur uz vi wo xh yi yo zh zu"
    ).split(),
    "wmt21": "en ha is ja cs ru zh de".split(),
}


def model_config(config: dict[str, Any], origin: str) -> ModelConfig:
    """mt's ``model`` group for an M2M-100 / NLLB ``config.json``; what mt cannot represent is refused by field."""
    if config.get("layernorm_embedding"):
        raise refuse(origin, "layernorm_embedding", config["layernorm_embedding"],
                     "mt has no norm between the embeddings and the first layer")
    for field in MOE_FIELDS:
        if config.get(field):
            raise refuse(origin, field, config[field], "a mixture of experts; mt's feed-forward layers are dense")
    return ModelConfig(
        name="m2m_100",
        **layer_options(config, origin, M2M100_DEFAULTS),
        pre_ln=True,
        sinusoid="fairseq",
        position_offset=POSITION_OFFSET,
        tie_output=bool(config.get("tie_word_embeddings", True)),
        scale_embeddings=bool(config.get("scale_embedding", True)),
        share_all_embeddings=True,
    )


def vocabulary(directory: HFDirectory, config: dict[str, Any]) -> tuple[Tokenizers, Reordered]:
    """The ``VocabTokenizer`` (one for both sides) in mt's id order, and the reordering of the embedding rows."""
    origin = str(directory.path)
    pieces = pieces_of(directory)
    order = reorder(pieces, config.get("vocab_size", len(pieces)), pad=config.get("pad_token_id", 1),
                    unk=unk_id(pieces, origin), eos=config.get("eos_token_id", 2),
                    start=config.get("decoder_start_token_id", 2), origin=origin)
    tokenizer = VocabTokenizer(directory.file("sentencepiece.bpe.model").read_bytes(), order.pieces, len(order.order))
    if not tokenizer.language_codes:
        raise PretrainedError(f"{origin}: the vocabulary has no language codes (M2M-100's __en__, NLLB's eng_Latn)")
    return Tokenizers(tokenizer, tokenizer, joint=True), order


def pieces_of(directory: HFDirectory) -> list[str]:
    """The directory's vocabulary as the list id -> piece: NLLB's ``tokenizer.json``, else M2M-100's ``vocab.json``
    and language codes; its ids must be 0 .. n-1, each once."""
    fast = directory.json("tokenizer.json")
    if fast:
        by_id, name = fast_vocabulary(fast, directory), "tokenizer.json"
    elif (directory.path / "vocab.json").is_file():
        by_id, name = m2m100_vocabulary(directory), "vocab.json"
    else:
        raise PretrainedError(f"{directory.path} has no tokenizer.json (NLLB) or vocab.json (M2M-100)")
    pieces = [by_id.get(i) for i in range(len(by_id))]
    if None in pieces:
        raise PretrainedError(f"{directory.path / name}: ids are not 0 .. {len(by_id) - 1}, each once")
    return pieces  # type: ignore[return-value]


def fast_vocabulary(fast: dict[str, Any], directory: HFDirectory) -> dict[int, str]:
    """id -> piece of a ``tokenizer.json``: its model's vocabulary (BPE's piece -> id, or Unigram's list of
    ``[piece, score]``), then its added tokens (the language codes, ``<mask>``)."""
    vocab = fast.get("model", {}).get("vocab")
    if isinstance(vocab, dict):
        by_id = {int(i): piece for piece, i in vocab.items()}
    elif isinstance(vocab, list):
        by_id = {i: entry[0] for i, entry in enumerate(vocab)}
    else:
        raise PretrainedError(f"{directory.path / 'tokenizer.json'}: model.vocab is neither a BPE nor a Unigram "
                              "vocabulary")
    for token in fast.get("added_tokens", []):
        if by_id.setdefault(int(token["id"]), token["content"]) != token["content"]:
            raise PretrainedError(f"{directory.path / 'tokenizer.json'}: added token {token['content']!r} takes id "
                                  f"{token['id']} of {by_id[int(token['id'])]!r}")
    return by_id


def m2m100_vocabulary(directory: HFDirectory) -> dict[int, str]:
    """id -> piece of M2M-100's ``vocab.json`` (piece -> id), and ``__xx__`` for each language code numbered after
    it, in ``M2M100Tokenizer``'s order of ``tokenizer_config.json``'s ``language_codes``."""
    by_id = {int(i): piece for piece, i in directory.json("vocab.json").items()}
    codes = directory.json("tokenizer_config.json").get("language_codes", "m2m100")
    if codes not in M2M100_LANGUAGES:
        raise PretrainedError(f"{directory.path / 'tokenizer_config.json'}: language_codes={codes!r}; M2M100Tokenizer "
                              f"has {', '.join(M2M100_LANGUAGES)}")
    first = len(by_id)
    return by_id | {first + i: f"__{lang}__" for i, lang in enumerate(M2M100_LANGUAGES[codes])}


def positions(weights: Weights, cfg: ModelConfig, origin: str) -> None:
    """A position table the weights store (older saves) must be fairseq's sinusoids from ``POSITION_OFFSET``: mt
    computes them (``model.sinusoid=fairseq``, ``model.position_offset``)."""
    rows = torch.arange(POSITION_OFFSET, POSITION_OFFSET + cfg.max_positions)
    expected = sinusoid_table(rows, cfg.d_model, "fairseq")
    for side in ("encoder", "decoder"):
        name = f"model.{side}.embed_positions.weights"
        if weights.has(name):
            table = weights.take(name)[POSITION_OFFSET : POSITION_OFFSET + cfg.max_positions]
            if table.shape != expected.shape or not torch.allclose(table, expected, atol=1e-3):
                raise PretrainedError(f"{origin}: {name} is not fairseq's sinusoids from position {POSITION_OFFSET}, "
                                      "which mt computes")


def final_norms(weights: Weights) -> dict[str, Tensor]:
    """The norms after the last encoder and decoder layers (Pre-LN) under mt's names."""
    return {f"{mt_name}.{kind}": weights.take(f"{name}.{kind}")
            for mt_name, name in FINAL_NORMS.items() for kind in ("weight", "bias")}


def import_m2m100(directory: HFDirectory) -> tuple[ModelConfig, dict[str, Tensor], Tokenizers]:
    """mt's model config, weights (mt's names) and tokenizers of an M2M100ForConditionalGeneration directory."""
    origin = str(directory.path)
    cfg = model_config(directory.config, origin)
    tokenizers, order = vocabulary(directory, directory.config)
    weights = Weights(directory.weights(), origin)
    positions(weights, cfg, origin)
    state = embeddings(weights, cfg, order, order, origin) | final_norms(weights)
    return (*bias_and_layers(weights, cfg, state, order), tokenizers)  # the bias masks the copy of </s> in <s>
