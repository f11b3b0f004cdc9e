"""Parameter and memory accounting: counts by component, a closed form, and a CLI.

    python -m mt.model.summary --model transformer_base --vocab 37000

Counts are split into weight matrices (every parameter of 2+ dimensions: projections, embeddings)
and biases + LayerNorm gains/shifts (1-dimensional). A parameter shared by several modules (tied
embeddings) is counted once; sinusoidal positions are buffers, not parameters.
"""

from __future__ import annotations

import argparse
from pathlib import Path

import torch
from omegaconf import OmegaConf

from mt.config import CONF_DIR, ModelConfig
from mt.model.layers import GATED, swiglu_hidden_size
from mt.model.seq2seq import Seq2SeqTransformer, build_model

COMPONENTS = ("embeddings", "encoder", "decoder")


def _component(name: str) -> str:
    """Embeddings (an untied output projection too), else the stack a parameter belongs to."""
    return "embeddings" if ".embedding." in f".{name}" or name == OUTPUT_PROJECTION else name.split(".")[0]


OUTPUT_PROJECTION = "decoder.output_projection"  # ``model.tie_output=false``: a (V, D) matrix of its own


def count_parameters(model: Seq2SeqTransformer) -> dict[str, int]:
    """Counts ``{embeddings,encoder,decoder}_{weights,biases}``, ``weights``, ``biases`` and ``total``."""
    counts = {f"{c}_{kind}": 0 for c in COMPONENTS for kind in ("weights", "biases")}
    for name, param in model.named_parameters():  # yields a shared parameter once
        counts[f"{_component(name)}_{'weights' if param.dim() >= 2 else 'biases'}"] += param.numel()
    counts["weights"] = sum(counts[f"{c}_weights"] for c in COMPONENTS)
    counts["biases"] = sum(counts[f"{c}_biases"] for c in COMPONENTS)
    counts["total"] = counts["weights"] + counts["biases"]
    return counts


def count_parameters_closed_form(
    N_enc: int,
    N_dec: int,
    d: int,
    d_ff: int,
    V: int,
    shared: bool = True,
    *,
    heads: int = 1,
    kv_heads: int = 0,
    pre_ln: bool = False,
    norm: str = "layernorm",
    activation: str = "relu",
    swiglu_hidden: int = 0,
    positions: str = "sinusoidal",
    max_positions: int = 1024,
    qk_norm: bool = False,
    tie_output: bool = True,
) -> dict[str, int]:
    """The same counts as ``count_parameters``, by formula (defaults: Post-LN, sinusoidal positions).

    Encoder layer: Q, K, V, O (4 d^2 + 4d), FFN (2 d d_ff + d_ff + d), 2 LayerNorms (4d).
    Decoder layer: two attentions (8 d^2 + 8d), FFN, 3 LayerNorms (6d). Embeddings: one V x d matrix
    (``shared``: encoder = decoder = output projection) or two (source and target, both of size V), and
    one more for an output projection of its own (``tie_output=False``).
    Options: ``kv_heads`` (Hkv heads of d / heads: K and V are d x Hkv Dh each), ``qk_norm`` (2 Dh gains
    per attention), ``norm="rmsnorm"`` (d per norm, no shift), ``activation="swiglu"`` (three matrices
    d x h and biases 2h + d, h = ``swiglu_hidden_size``), ``pre_ln`` (a final norm per stack),
    ``positions="learned"`` (a max_positions x d table per stack; rope has no parameters).
    """
    head_dim = d // heads
    kv = (kv_heads or heads) * head_dim
    attn_w, attn_b = 2 * d * d + 2 * d * kv, 2 * d + 2 * kv + (2 * head_dim if qk_norm else 0)
    if activation in GATED:
        hidden = swiglu_hidden_size(d_ff, swiglu_hidden)
        ffn_w, ffn_b = 3 * d * hidden, 2 * hidden + d
    else:
        ffn_w, ffn_b = 2 * d * d_ff, d_ff + d
    norm_b = 2 * d if norm == "layernorm" else d
    final = norm_b if pre_ln else 0
    counts = {
        "embeddings_weights": V * d * ((1 if shared else 2) + (0 if tie_output else 1))
        + (2 * max_positions * d if positions == "learned" else 0),
        "embeddings_biases": 0,
        "encoder_weights": N_enc * (attn_w + ffn_w),
        "encoder_biases": N_enc * (attn_b + ffn_b + 2 * norm_b) + final,
        "decoder_weights": N_dec * (2 * attn_w + ffn_w),
        "decoder_biases": N_dec * (2 * attn_b + ffn_b + 3 * norm_b) + final,
    }
    counts["weights"] = sum(counts[f"{c}_weights"] for c in COMPONENTS)
    counts["biases"] = sum(counts[f"{c}_biases"] for c in COMPONENTS)
    counts["total"] = counts["weights"] + counts["biases"]
    return counts


def closed_form_for(cfg: ModelConfig, V: int) -> dict[str, int]:
    """``count_parameters_closed_form`` for the model ``cfg`` describes (vocabulary V on both sides)."""
    return count_parameters_closed_form(
        cfg.encoder_layers, cfg.decoder_layers, cfg.d_model, cfg.d_ff, V, cfg.share_all_embeddings,
        heads=cfg.heads, kv_heads=cfg.kv_heads, pre_ln=cfg.pre_ln, norm=cfg.norm, activation=cfg.activation,
        swiglu_hidden=cfg.swiglu_hidden, positions=cfg.positions, max_positions=cfg.max_positions,
        qk_norm=cfg.qk_norm, tie_output=cfg.tie_output,
    )  # fmt: skip


def kv_cache_values_per_token(decoder_layers: int, d_model: int, heads: int = 1, kv_heads: int = 0) -> int:
    """Self-attention K and V values added per generated token, per sentence per beam, all layers
    (grouped-query attention: ``kv_heads`` of the ``heads`` heads, i.e. heads / kv_heads times fewer)."""
    return 2 * decoder_layers * (kv_heads or heads) * (d_model // heads)


def load_model_config(name: str) -> ModelConfig:
    """``conf/model/<name>.yaml`` (or a path to a .yaml) merged onto the ``ModelConfig`` defaults."""
    path = Path(name) if name.endswith(".yaml") else Path(CONF_DIR) / "model" / f"{name}.yaml"
    raw = OmegaConf.load(path)
    raw.pop("defaults", None)  # the Hydra schema reference; the schema is ModelConfig itself
    return OmegaConf.to_object(OmegaConf.merge(OmegaConf.structured(ModelConfig), raw))  # type: ignore[return-value]


def summary(cfg: ModelConfig, src_vocab: int, tgt_vocab: int | None = None) -> str:
    """A printable table of parameters by component, their bytes, and the KV-cache cost per token."""
    tgt_vocab = src_vocab if tgt_vocab is None else tgt_vocab
    with torch.device("meta"):  # shapes only: nothing is allocated or initialised
        model = build_model(cfg, src_vocab, tgt_vocab)
    counts = count_parameters(model)
    tying = ("3-way (encoder = decoder = output)" if cfg.share_all_embeddings else "2-way (decoder = output)") \
        if cfg.tie_output else ("encoder = decoder, " if cfg.share_all_embeddings else "none, ") + "output untied"
    lines = [
        f"{cfg.name}: {cfg.encoder_layers}+{cfg.decoder_layers} layers, d_model {cfg.d_model}, "
        f"d_ff {cfg.d_ff}, {cfg.heads} heads, vocab {src_vocab} -> {tgt_vocab}, tying {tying}",
        f"{'Pre' if cfg.pre_ln else 'Post'}-LN {cfg.norm}, {cfg.activation}, {cfg.positions} positions, "
        f"{cfg.kv_heads or cfg.heads} K/V heads{', qk-norm' if cfg.qk_norm else ''}",
        f"{'component':<12}{'weight matrices':>18}{'biases+LayerNorm':>18}{'total':>16}",
    ]
    counts["total_weights"], counts["total_biases"] = counts["weights"], counts["biases"]
    for c in (*COMPONENTS, "total"):
        w, b = counts[f"{c}_weights"], counts[f"{c}_biases"]
        lines.append(f"{c:<12}{w:>18,}{b:>18,}{w + b:>16,}")
    n = counts["total"]
    kv = kv_cache_values_per_token(cfg.decoder_layers, cfg.d_model, cfg.heads, cfg.kv_heads)
    kv_width = (cfg.kv_heads or cfg.heads) * (cfg.d_model // cfg.heads)
    lines += [
        f"parameter bytes: fp32 {4 * n:,} ({4 * n / 2**20:.1f} MiB), "
        f"bf16 {2 * n:,} ({2 * n / 2**20:.1f} MiB)",
        f"KV cache per generated token, per sentence per beam: self-attention K+V, {cfg.decoder_layers} "
        f"layers x 2 x {kv_width} = {kv:,} values",
        f"  = {4 * kv:,} B fp32, {2 * kv:,} B bf16 (cross-attention K+V: the same per source token, once)",
    ]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default="transformer_base", help="conf/model/<NAME>.yaml, or a .yaml path")
    parser.add_argument("--vocab", type=int, required=True, help="source vocabulary size (used as given)")
    parser.add_argument("--tgt-vocab", type=int, default=None, help="target vocabulary (default: --vocab)")
    args = parser.parse_args(argv)
    print(summary(load_model_config(args.model), args.vocab, args.tgt_vocab))


if __name__ == "__main__":
    main()
