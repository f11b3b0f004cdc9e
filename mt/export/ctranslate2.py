"""Export to CTranslate2: a ready model directory (``model.bin``, vocabularies, SentencePiece, README).

The network is copied weight for weight (fused Q|K|V and K|V projections included, mt's positional
table as the position encodings, embeddings scaled by sqrt(D)), Post-LN or Pre-LN with its final
LayerNorms. The model's config makes raw SentencePiece pieces work in any CTranslate2 client:
``add_source_eos`` (mt's sources are ``pieces + [EOS]``), decoding starts from ``<s>`` (BOS) and ends
at ``</s>``. What mt never generates is banned in the weights themselves: the embedding's padding rows
(ids >= the SentencePiece vocabulary) are dropped, and PAD and BOS get a -1e4 output bias.

One difference no weight can remove: CTranslate2 bans tokens *before* its softmax (their probability
mass is renormalised onto the others), mt bans them *after* it (``mt.decode.common``). Each step's
log-probs then differ by the same ``-log(1 - p(PAD) - p(BOS) - p(padding ids))`` for every token;
greedy outputs are identical, beam search ranks hypotheses of different lengths by that much apart.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import torch

from mt.config import ModelConfig
from mt.data.tokenizer import BOS_ID, EOS_ID, PAD_ID, UNK_ID
from mt.export.common import (
    ExportError,
    ExportSource,
    load_source,
    need,
    pieces,
    position_table,
    prepare_output_dir,
    removed_on_failure,
    search_defaults,
)
from mt.export.readme import ct2_readme
from mt.model import Seq2SeqTransformer, modern_options

BAN_LOGIT = -1.0e4  # an output bias that makes a token's probability exactly 0 (exp underflows), fp16-safe
ACTIVATIONS = {"relu": "RELU", "gelu": "GELU"}  # CTranslate2's GELU is the erf form, as torch's nn.GELU


def _array(t: torch.Tensor) -> np.ndarray:
    return t.detach().float().cpu().numpy().copy()


def _linear(spec, weight: torch.Tensor, bias: torch.Tensor | None) -> None:
    spec.weight = _array(weight)
    if bias is not None:
        spec.bias = _array(bias)


def _norm(spec, ln: torch.nn.LayerNorm) -> None:
    spec.gamma, spec.beta = _array(ln.weight), _array(ln.bias)


def _attention(spec, mha, self_attention: bool) -> None:
    """CTranslate2 keeps mt's fusions: one Q|K|V linear in self-attention, Q then K|V in cross-attention."""
    if self_attention:
        _linear(spec.linear[0], mha.qkv.weight, mha.qkv.bias)
    else:
        _linear(spec.linear[0], mha.q.weight, mha.q.bias)
        _linear(spec.linear[1], mha.kv.weight, mha.kv.bias)
    _linear(spec.linear[-1], mha.out.weight, mha.out.bias)


def _ffn(spec, layer) -> None:
    _norm(spec.layer_norm, layer.ffn_res.norm)
    _linear(spec.linear_0, layer.ffn.fc1.weight, layer.ffn.fc1.bias)
    _linear(spec.linear_1, layer.ffn.fc2.weight, layer.ffn.fc2.bias)


def _inputs(spec, stack, vocab_size: int) -> None:
    """Token embedding (its first ``vocab_size`` rows), sqrt(D) scaling, position table, Pre-LN final norm."""
    embeddings = spec.embeddings[0] if isinstance(spec.embeddings, list) else spec.embeddings
    embeddings.weight = _array(stack.embedding.token.weight[:vocab_size])
    spec.scale_embeddings = True
    spec.position_encodings.encodings = _array(position_table(stack.embedding))
    if stack.final_norm is not None:
        _norm(spec.layer_norm, stack.final_norm)


def build_spec(model: Seq2SeqTransformer, cfg: ModelConfig, src_pieces: list[str], tgt_pieces: list[str]):
    """The ``TransformerSpec`` of ``model`` with its vocabularies and config (``add_source_eos``, tokens)."""
    common_spec = need("ctranslate2.specs.common_spec", "ctranslate2")
    transformer_spec = need("ctranslate2.specs.transformer_spec", "ctranslate2")
    if cfg.activation not in ACTIVATIONS:
        raise ExportError(f"model.activation={cfg.activation} has no CTranslate2 equivalent (relu, gelu)")
    unsupported = ", ".join(modern_options(cfg))
    if unsupported:
        raise ExportError(f"{unsupported}: not supported by the CTranslate2 export (export a model without it)")
    layers = (len(model.encoder.layers), len(model.decoder.layers))
    spec = transformer_spec.TransformerSpec.from_config(
        layers, cfg.heads, pre_norm=cfg.pre_ln, activation=getattr(common_spec.Activation, ACTIVATIONS[cfg.activation])
    )
    _inputs(spec.encoder, model.encoder, len(src_pieces))
    for layer_spec, layer in zip(spec.encoder.layer, model.encoder.layers, strict=True):
        _attention(layer_spec.self_attention, layer.self_attn, True)
        _norm(layer_spec.self_attention.layer_norm, layer.self_attn_res.norm)
        _ffn(layer_spec.ffn, layer)
    _inputs(spec.decoder, model.decoder, len(tgt_pieces))
    bias = torch.zeros(len(tgt_pieces))
    bias[[PAD_ID, BOS_ID]] = BAN_LOGIT
    _linear(spec.decoder.projection, model.decoder.output_weight[: len(tgt_pieces)], bias)
    for layer_spec, layer in zip(spec.decoder.layer, model.decoder.layers, strict=True):
        _attention(layer_spec.self_attention, layer.self_attn, True)
        _norm(layer_spec.self_attention.layer_norm, layer.self_attn_res.norm)
        _attention(layer_spec.attention, layer.cross_attn, False)
        _norm(layer_spec.attention.layer_norm, layer.cross_attn_res.norm)
        _ffn(layer_spec.ffn, layer)
    spec.register_source_vocabulary(src_pieces)
    spec.register_target_vocabulary(tgt_pieces)
    spec.config.add_source_bos = False
    spec.config.add_source_eos = True
    spec.config.bos_token = tgt_pieces[BOS_ID]
    spec.config.eos_token = tgt_pieces[EOS_ID]
    spec.config.unk_token = tgt_pieces[UNK_ID]
    spec.config.decoder_start_token = tgt_pieces[BOS_ID]
    spec.config.layer_norm_epsilon = model.encoder.layers[0].ffn_res.norm.eps
    return spec


def check_quantization(quantization: str | None) -> None:
    """``ExportError`` for a value CTranslate2's converter does not accept."""
    model_spec = need("ctranslate2.specs.model_spec", "ctranslate2")
    if quantization is not None and quantization not in model_spec.ACCEPTED_MODEL_TYPES:
        choices = ", ".join(model_spec.ACCEPTED_MODEL_TYPES)
        raise ExportError(f"--quantization {quantization} is not a CTranslate2 type; expected one of {choices}")


def export_ctranslate2(
    ckpt: str | Path, out: str | Path, quantization: str | None = None, force: bool = False
) -> list[str]:
    """Write the CTranslate2 model of checkpoint ``ckpt`` to ``out``; returns notes on what differs from mt."""
    converters = need("ctranslate2.converters", "ctranslate2")
    check_quantization(quantization)
    source, out = load_source(ckpt), Path(out)
    prepare_output_dir(out, force)
    src_pieces, tgt_pieces = pieces(source.tokenizers.src), pieces(source.tokenizers.tgt)

    class MtConverter(converters.Converter):
        def _load(self):
            return build_spec(source.model, source.cfg.model, src_pieces, tgt_pieces)

    defaults = search_defaults(source.cfg)
    with removed_on_failure(out):
        MtConverter().convert(str(out), quantization=quantization, force=False)
        source.tokenizers.save(out)
        (out / "README.md").write_text(ct2_readme(source, defaults, quantization), encoding="utf-8")
    return [*defaults.notes, renormalisation_note(source)]


def renormalisation_note(source: ExportSource) -> str:
    """Why beam outputs can differ from mt's, in one line (see the module docstring)."""
    padding = source.tokenizers.tgt.padded_vocab_size - source.tokenizers.tgt.vocab_size
    return (
        f"PAD, BOS{f' and {padding} embedding padding ids' if padding else ''} are banned before the softmax "
        "(mt bans them after it): greedy outputs are identical, beam scores shift by -log(1 - their probability)"
    )
