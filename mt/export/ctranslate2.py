"""Export to CTranslate2: a ready model directory (``model.bin``, vocabularies, SentencePiece, README).

The network is copied weight for weight (fused Q|K|V and K|V projections included, mt's positional
table as the position encodings, embeddings scaled by sqrt(D)), Post-LN or Pre-LN with its final
norms. The options of an imported Marian model (``mt.pretrained``) map too: ``model.activation=silu``
is CTranslate2's Swish; ``model.sinusoid=marian`` needs nothing (the table is copied, whatever its
frequencies); ``model.scale_embeddings=false`` is ``scale_embeddings=False``; ``model.logits_bias`` is
the output projection's bias (its ``-inf`` rows at the ban value below). The modern options of
``mt.model`` map onto CTranslate2's Transformer spec, all but qk-norm:

- ``model.norm=rmsnorm``: ``rms_norm`` (gain only); one epsilon for every norm (``layer_norm_epsilon``,
  mt's ``NORM_EPS``: a model whose norms disagree on it is refused);
- ``model.activation=swiglu``: ``ffn_glu`` with the Swish (SiLU) activation on ``linear_0`` (mt's
  ``fc1``) times ``linear_0_noact`` (mt's ``gate``, the linear half);
- ``model.positions=rope``: ``rotary_dim=0`` (every head dimension) with ``rotary_interleave=False``
  (mt's half-split layout) and mt's base, in self-attention only, and no position encodings at all;
- ``model.kv_heads``: ``num_heads_kv`` (grouped- or multi-query attention in self- and cross-attention;
  the fused projection is Q|K|V with K and V of ``kv_heads`` heads, mt's ``q`` then ``kv``).

An imported M2M-100 / NLLB model exports as it is: its sources start with the source language's code (a
piece like any other) and each translation with the target's, which a CTranslate2 caller gives as
``target_prefix`` (mt forces it; the exported README shows how).

``model.qk_norm=true`` is refused: CTranslate2 (4.8) normalises the encoder-decoder attention's queries
over the whole D-vector, before splitting heads (its self-attention and keys are per head, as mt's), so
with more than one head no weight reproduces mt's per-head RMSNorm.

The model's config makes raw SentencePiece pieces work in any CTranslate2 client:
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
from typing import Any

import numpy as np
import torch
from torch import nn

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
from mt.model import MultiHeadAttention, Seq2SeqTransformer

BAN_LOGIT = -1.0e4  # an output bias that makes a token's probability exactly 0 (exp underflows), fp16-safe
# CTranslate2's GELU is the erf form, as torch's nn.GELU; its SWISH is x * sigmoid(x), torch's SiLU
ACTIVATIONS = {"relu": "RELU", "gelu": "GELU", "silu": "SWISH", "swiglu": "SWISH"}


def _array(t: torch.Tensor) -> np.ndarray:
    return t.detach().float().cpu().numpy().copy()


def _linear(spec, weight: torch.Tensor, bias: torch.Tensor | None) -> None:
    spec.weight = _array(weight)
    if bias is not None:
        spec.bias = _array(bias)


def _norm(spec, norm: nn.LayerNorm | nn.RMSNorm) -> None:
    """LayerNorm: gain and shift; RMSNorm: the gain only (CTranslate2's ``rms_norm`` spec has no beta)."""
    spec.gamma = _array(norm.weight)
    if isinstance(norm, nn.LayerNorm):
        spec.beta = _array(norm.bias)


def _attention(spec, mha: MultiHeadAttention) -> None:
    """CTranslate2 keeps mt's fusions: one Q|K|V linear in self-attention (mt's ``qkv``, or ``q`` then
    ``kv`` with fewer K/V heads), Q then K|V in cross-attention."""
    if mha.self_attention and mha.fused:
        _linear(spec.linear[0], mha.qkv.weight, mha.qkv.bias)
    elif mha.self_attention:
        _linear(spec.linear[0], torch.cat([mha.q.weight, mha.kv.weight]), torch.cat([mha.q.bias, mha.kv.bias]))
    else:
        _linear(spec.linear[0], mha.q.weight, mha.q.bias)
        _linear(spec.linear[1], mha.kv.weight, mha.kv.bias)
    _linear(spec.linear[-1], mha.out.weight, mha.out.bias)


def _ffn(spec, layer) -> None:
    """fc1 carries the activation (``linear_0``); SwiGLU's linear half ``gate`` is ``linear_0_noact``."""
    _norm(spec.layer_norm, layer.ffn_res.norm)
    _linear(spec.linear_0, layer.ffn.fc1.weight, layer.ffn.fc1.bias)
    if layer.ffn.gate is not None:
        _linear(spec.linear_0_noact, layer.ffn.gate.weight, layer.ffn.gate.bias)
    _linear(spec.linear_1, layer.ffn.fc2.weight, layer.ffn.fc2.bias)


def _inputs(spec, stack, vocab_size: int) -> None:
    """Token embedding (its first ``vocab_size`` rows), sqrt(D) scaling (or none), position table (the
    model's own sinusoids, Marian's or fairseq's, or learned), Pre-LN final norm.

    With rotary positions mt adds nothing to the embeddings, and neither may CTranslate2: its encoder
    spec keeps an optional position table, which is removed (the decoder spec has none then)."""
    embeddings = spec.embeddings[0] if isinstance(spec.embeddings, list) else spec.embeddings
    embeddings.weight = _array(stack.embedding.token.weight[:vocab_size])
    spec.scale_embeddings = stack.embedding.scale != 1.0
    if stack.embedding.positions is not None:
        spec.position_encodings.encodings = _array(position_table(stack.embedding))
    elif hasattr(spec, "position_encodings"):
        del spec.position_encodings
    if stack.final_norm is not None:
        _norm(spec.layer_norm, stack.final_norm)


def output_bias(model: Seq2SeqTransformer, vocab_size: int) -> torch.Tensor:
    """The projection's bias over the first ``vocab_size`` ids: the model's logits bias (an imported model's,
    else zero) with PAD, BOS and its ``-inf`` rows at ``BAN_LOGIT``.

    Not ``-inf`` itself: CTranslate2 4.8 on the CPU does take it (float32, int8 and float16 gave the same
    outputs), but its GPU kernels (fp16 GEMMs with the bias fused) were not checked, and ``BAN_LOGIT``
    gives the same zero probability (exp underflows) as it does for PAD and BOS, in every compute type."""
    found = model.decoder.logits_bias
    bias = torch.zeros(vocab_size) if found is None else found[:vocab_size].detach().float().clone()
    bias[~torch.isfinite(bias)] = BAN_LOGIT
    bias[[PAD_ID, BOS_ID]] = BAN_LOGIT
    return bias


def norm_epsilon(model: Seq2SeqTransformer) -> float:
    """The one epsilon of every norm in ``model``: CTranslate2 has a single ``layer_norm_epsilon``."""
    found = {m.eps for m in model.modules() if isinstance(m, (nn.LayerNorm, nn.RMSNorm))}
    if len(found) != 1 or None in found:
        raise ExportError(f"norm epsilons {sorted(map(str, found))}: CTranslate2 takes one epsilon for every norm")
    return float(found.pop())  # type: ignore[arg-type]


def stack_options(model: Seq2SeqTransformer, cfg: ModelConfig) -> dict[str, Any]:
    """The keyword arguments of CTranslate2's encoder and decoder specs that describe mt's layers."""
    common_spec = need("ctranslate2.specs.common_spec", "ctranslate2")
    if cfg.activation not in ACTIVATIONS:
        raise ExportError(f"model.activation={cfg.activation} has no CTranslate2 equivalent ({', '.join(ACTIVATIONS)})")
    layer = model.encoder.layers[0]
    attn = layer.self_attn
    if attn.q_norm is not None:
        raise ExportError(
            "model.qk_norm=true: not supported by the CTranslate2 export (CTranslate2 normalises the "
            "encoder-decoder attention's queries over all heads at once, mt per head)"
        )
    options: dict[str, Any] = dict(
        pre_norm=cfg.pre_ln,
        activation=getattr(common_spec.Activation, ACTIVATIONS[cfg.activation]),
        ffn_glu=layer.ffn.gate is not None,
        rms_norm=isinstance(layer.ffn_res.norm, nn.RMSNorm),
        num_heads_kv=attn.kv_heads if attn.kv_heads != attn.heads else None,
    )
    if attn.rope is not None:  # rotary_dim=0: every dimension of a head; mt's half-split layout [x1 | x2]
        options.update(rotary_dim=0, rotary_interleave=False, rotary_base=attn.rope.base)
    return options


def build_spec(model: Seq2SeqTransformer, cfg: ModelConfig, src_pieces: list[str], tgt_pieces: list[str]):
    """The ``TransformerSpec`` of ``model`` with its vocabularies and config (``add_source_eos``, tokens)."""
    transformer_spec = need("ctranslate2.specs.transformer_spec", "ctranslate2")
    options, epsilon = stack_options(model, cfg), norm_epsilon(model)
    spec = transformer_spec.TransformerSpec(
        transformer_spec.TransformerEncoderSpec(len(model.encoder.layers), cfg.heads, **options),
        transformer_spec.TransformerDecoderSpec(len(model.decoder.layers), cfg.heads, **options),
    )
    _inputs(spec.encoder, model.encoder, len(src_pieces))
    for layer_spec, layer in zip(spec.encoder.layer, model.encoder.layers, strict=True):
        _attention(layer_spec.self_attention, layer.self_attn)
        _norm(layer_spec.self_attention.layer_norm, layer.self_attn_res.norm)
        _ffn(layer_spec.ffn, layer)
    _inputs(spec.decoder, model.decoder, len(tgt_pieces))
    vocab_size = len(tgt_pieces)
    _linear(spec.decoder.projection, model.decoder.output_weight[:vocab_size], output_bias(model, vocab_size))
    for layer_spec, layer in zip(spec.decoder.layer, model.decoder.layers, strict=True):
        _attention(layer_spec.self_attention, layer.self_attn)
        _norm(layer_spec.self_attention.layer_norm, layer.self_attn_res.norm)
        _attention(layer_spec.attention, layer.cross_attn)
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
    spec.config.layer_norm_epsilon = epsilon
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
