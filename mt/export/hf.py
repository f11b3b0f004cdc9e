"""Export to Hugging Face transformers: a ``MarianMTModel`` directory that loads offline.

``config.json``, ``model.safetensors`` and ``generation_config.json``, plus what ``MarianTokenizer``
(and ``AutoTokenizer``) read: ``source.spm``, ``target.spm``, ``vocab.json`` (``target_vocab.json``
for separate vocabularies) and ``tokenizer_config.json``. Marian is mt's architecture (Post-LN,
sqrt(D)-scaled embeddings or not (``scale_embedding``), relu, gelu or silu ("swish"), a tied output
projection or its own (``tie_word_embeddings``), decoding from ``<s>``) with two differences the export removes:

- positions: Marian builds its sinusoids with frequencies ``10000^(-2i/D)``, mt with
  ``10000^(-i/(D/2-1))`` (fairseq's, unless ``model.sinusoid=marian``), which differ by ~1e-3 already
  at position 10. The table is a plain ``nn.Embedding`` weight, so mt's table (or its learned
  positions) is written into ``model.safetensors`` and checked after loading. transformers' own
  ``save_pretrained`` leaves the table out (``_keys_to_ignore_on_save``): a model re-saved that way
  gets Marian's table back.
- projections: mt's fused Q|K|V (self-attention) and K|V (cross-attention) are split into
  ``q_proj``/``k_proj``/``v_proj``; ``final_logits_bias`` is ``model.logits_bias`` (an imported
  model's, ``-inf`` rows included), else zero.

An imported model (``mt-import``) goes back as it came: its SentencePiece models and vocabulary (one
``vocab.json`` when both sides number the same pieces), in mt's id order (``<pad> <unk> <s> </s>``
first, decoding from ``<s>``).

Generation: PAD, BOS and the embedding's padding ids are ``suppress_tokens`` (applied after the
log-softmax in beam search, as mt bans them), EOS is forced at ``max_length`` as mt forces it.
Pre-LN models are refused: Marian has no ``normalize_before``.

A model of several target languages keeps its tags (``>>fr<<``) in the vocabulary; ``MarianTokenizer``
splits a leading ``>>fr<<`` off a line and encodes the rest, `` text`` with its space. mt's SentencePiece
keeps spaces as written, so the exported ``source.spm`` of such a model drops extra whitespace instead:
``">>fr<< text"`` then gives mt's ``[>>fr<<] + encode("text")`` (runs of spaces inside a line become
one, where mt keeps them).
"""

from __future__ import annotations

import json
import warnings
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import torch

from mt.data.languages import is_multilingual, source_languages, target_languages
from mt.data.tokenizer import BOS_ID, EOS_ID, PAD_ID
from mt.export.common import (
    ExportError,
    ExportSource,
    SearchDefaults,
    banned_ids,
    fused_split,
    load_source,
    need,
    pieces,
    position_table,
    prepare_output_dir,
    removed_on_failure,
    search_defaults,
)
from mt.export.readme import hf_readme
from mt.model import modern_options

# mt's activation -> transformers' name ("gelu" is the erf form, as torch's nn.GELU; "swish" is SiLU)
ACTIVATIONS = {"relu": "relu", "gelu": "gelu", "silu": "swish"}


def check_supported(source: ExportSource) -> None:
    """``ExportError`` naming the first model option Marian cannot represent."""
    model = source.cfg.model
    if model.pre_ln:
        raise ExportError(
            "model.pre_ln=true cannot be exported to Hugging Face: MarianMTModel has only Post-LN layers "
            "(no normalize_before, no final LayerNorm); export it with --to ctranslate2"
        )
    if model.activation not in ACTIVATIONS:
        raise ExportError(f"model.activation={model.activation} has no Marian equivalent ({', '.join(ACTIVATIONS)})")
    unsupported = ", ".join(modern_options(model))
    if unsupported:
        raise ExportError(f"{unsupported} cannot be exported to Hugging Face: MarianMTModel has no such option")


def marian_config(source: ExportSource):
    """The ``MarianConfig`` of ``source.model``."""
    transformers = need("transformers", "hf")
    model, tok = source.cfg.model, source.tokenizers
    return transformers.MarianConfig(
        vocab_size=tok.src.padded_vocab_size,
        decoder_vocab_size=tok.tgt.padded_vocab_size,
        share_encoder_decoder_embeddings=model.share_all_embeddings,
        tie_word_embeddings=model.tie_output,  # the output projection is the target embedding, or its own
        d_model=model.d_model,
        encoder_layers=model.encoder_layers,
        decoder_layers=model.decoder_layers,
        encoder_attention_heads=model.heads,
        decoder_attention_heads=model.heads,
        encoder_ffn_dim=model.d_ff,
        decoder_ffn_dim=model.d_ff,
        activation_function=ACTIVATIONS[model.activation],
        dropout=model.dropout,
        attention_dropout=model.attention_dropout,
        activation_dropout=model.activation_dropout,
        max_position_embeddings=model.max_positions,
        scale_embedding=model.scale_embeddings,
        pad_token_id=PAD_ID,
        bos_token_id=BOS_ID,
        eos_token_id=EOS_ID,
        decoder_start_token_id=BOS_ID,
        forced_eos_token_id=EOS_ID,
        architectures=["MarianMTModel"],
    )


def _attention(prefix: str, mha, self_attention: bool) -> dict[str, torch.Tensor]:
    if self_attention:
        weights, biases = fused_split(mha.qkv.weight, 3), fused_split(mha.qkv.bias, 3)
    else:
        weights = [mha.q.weight.detach().clone(), *fused_split(mha.kv.weight, 2)]
        biases = [mha.q.bias.detach().clone(), *fused_split(mha.kv.bias, 2)]
    out = {}
    for name, weight, bias in zip(("q_proj", "k_proj", "v_proj"), weights, biases, strict=True):
        out[f"{prefix}.{name}.weight"], out[f"{prefix}.{name}.bias"] = weight, bias
    out[f"{prefix}.out_proj.weight"], out[f"{prefix}.out_proj.bias"] = mha.out.weight, mha.out.bias
    return out


def _module(prefix: str, module: torch.nn.Module) -> dict[str, torch.Tensor]:
    return {f"{prefix}.{name}": p for name, p in module.state_dict().items()}


def logits_bias(source: ExportSource) -> torch.Tensor:
    """``final_logits_bias`` (V,): the model's logits bias as it is (an imported model's ``-inf`` rows
    included: transformers adds it to the logits, so they stay exactly mt's), else zero."""
    found = source.model.decoder.logits_bias
    return torch.zeros(source.tokenizers.tgt.padded_vocab_size) if found is None else found.detach().clone()


def marian_state_dict(source: ExportSource) -> dict[str, torch.Tensor]:
    """mt's weights under ``MarianMTModel``'s names (every key of its ``state_dict``)."""
    model = source.model
    state = {
        "final_logits_bias": logits_bias(source).reshape(1, -1),
        "model.encoder.embed_tokens.weight": model.encoder.embedding.token.weight,
        "model.decoder.embed_tokens.weight": model.decoder.embedding.token.weight,
        "lm_head.weight": model.decoder.output_weight,
        "model.encoder.embed_positions.weight": position_table(model.encoder.embedding),
        "model.decoder.embed_positions.weight": position_table(model.decoder.embedding),
    }
    if source.cfg.model.share_all_embeddings:
        state["model.shared.weight"] = model.encoder.embedding.token.weight
    for i, layer in enumerate(model.encoder.layers):
        p = f"model.encoder.layers.{i}"
        state |= _attention(f"{p}.self_attn", layer.self_attn, True)
        state |= _module(f"{p}.self_attn_layer_norm", layer.self_attn_res.norm)
        state |= _module(f"{p}.fc1", layer.ffn.fc1) | _module(f"{p}.fc2", layer.ffn.fc2)
        state |= _module(f"{p}.final_layer_norm", layer.ffn_res.norm)
    for i, layer in enumerate(model.decoder.layers):
        p = f"model.decoder.layers.{i}"
        state |= _attention(f"{p}.self_attn", layer.self_attn, True)
        state |= _module(f"{p}.self_attn_layer_norm", layer.self_attn_res.norm)
        state |= _attention(f"{p}.encoder_attn", layer.cross_attn, False)
        state |= _module(f"{p}.encoder_attn_layer_norm", layer.cross_attn_res.norm)
        state |= _module(f"{p}.fc1", layer.ffn.fc1) | _module(f"{p}.fc2", layer.ffn.fc2)
        state |= _module(f"{p}.final_layer_norm", layer.ffn_res.norm)
    return {k: v.detach().float().contiguous() for k, v in state.items()}


def write_weights(source: ExportSource, config, out: Path) -> None:
    """``model.safetensors`` as transformers writes it, plus the two position tables it would leave out."""
    transformers = need("transformers", "hf")
    safetensors_torch = need("safetensors.torch", "hf")
    marian = transformers.MarianMTModel(config)
    state = marian_state_dict(source)
    if model_keys := set(marian.state_dict()) ^ set(state):
        raise AssertionError(f"weight names differ from MarianMTModel's: {sorted(model_keys)}")
    marian.load_state_dict(state, strict=True)
    marian.save_pretrained(out)  # the tied and ignored keys as transformers expects them
    path = out / "model.safetensors"
    saved = safetensors_torch.load_file(path)
    for key in ("model.encoder.embed_positions.weight", "model.decoder.embed_positions.weight"):
        saved[key] = state[key].clone()
    safetensors_torch.save_file(saved, path, metadata={"format": "pt"})
    path.chmod(0o644)  # safetensors writes 0600; the directory is meant to be shared and published


def generation_config(source: ExportSource, defaults: SearchDefaults):
    """Beam size, |Y|^alpha penalty, length limit with forced EOS, and mt's banned ids."""
    transformers = need("transformers", "hf")
    search = dict(num_beams=defaults.beam_size, do_sample=False)
    if defaults.beam_size > 1:  # transformers rejects beam-only flags with num_beams=1
        search |= dict(length_penalty=defaults.length_penalty, early_stopping=False)
    return transformers.GenerationConfig(
        decoder_start_token_id=BOS_ID,
        bos_token_id=BOS_ID,
        eos_token_id=EOS_ID,
        pad_token_id=PAD_ID,
        forced_eos_token_id=EOS_ID,
        max_length=defaults.max_output_pieces + 2,  # <s> + pieces + </s>
        suppress_tokens=banned_ids(source.tokenizers.tgt),
        **search,
    )


def without_extra_whitespace(model_proto: bytes) -> bytes:
    """A SentencePiece model that drops leading, trailing and repeated whitespace before encoding."""
    from sentencepiece import sentencepiece_model_pb2

    proto = sentencepiece_model_pb2.ModelProto()
    proto.ParseFromString(model_proto)
    proto.normalizer_spec.remove_extra_whitespaces = True
    return proto.SerializeToString()


def source_spm(source: ExportSource) -> bytes:
    """``source.spm``: mt's source model, made to read ``>>fr<< text`` for a model of several targets."""
    proto = source.tokenizers.src.model_proto
    return without_extra_whitespace(proto) if is_multilingual(source.cfg.data) else proto


def separate_vocabs(source: ExportSource) -> bool:
    """Whether the target needs a vocabulary of its own: not for a joint tokenizer, nor for two SentencePiece
    models that number the same pieces (an imported Marian model of one vocabulary, ``vocab.json``)."""
    tok = source.tokenizers
    return not tok.joint and pieces(tok.src) != pieces(tok.tgt)


def write_tokenizer(source: ExportSource, out: Path) -> None:
    """``MarianTokenizer`` files: both SentencePiece models, the piece -> id vocabularies, the config."""
    transformers = need("transformers", "hf")
    tok = source.tokenizers
    tmp = out / ".tokenizer"
    tmp.mkdir()
    (tmp / "source.spm").write_bytes(source_spm(source))
    tok.tgt.save(tmp / "target.spm")
    vocab = {piece: i for i, piece in enumerate(pieces(tok.src))}
    (tmp / "vocab.json").write_text(json.dumps(vocab, ensure_ascii=False, indent=1), encoding="utf-8")
    target_vocab = None
    separate = separate_vocabs(source)
    if separate:
        target_vocab = tmp / "target_vocab.json"
        target = {piece: i for i, piece in enumerate(pieces(tok.tgt))}
        target_vocab.write_text(json.dumps(target, ensure_ascii=False, indent=1), encoding="utf-8")
    tokenizer = transformers.MarianTokenizer(
        source_spm=str(tmp / "source.spm"),
        target_spm=str(tmp / "target.spm"),
        vocab=str(tmp / "vocab.json"),
        target_vocab_file=None if target_vocab is None else str(target_vocab),
        separate_vocabs=separate,
        source_lang=source_languages(source.cfg.data)[0],
        target_lang=None if is_multilingual(source.cfg.data) else target_languages(source.cfg.data)[0],
        model_max_length=source.cfg.model.max_positions,  # pieces + </s>
        clean_up_tokenization_spaces=False,  # " ." stays " .", as SentencePiece decodes it
    )
    tokenizer.save_pretrained(out)
    for path in sorted(tmp.iterdir()):
        path.unlink()
    tmp.rmdir()


def verify(source: ExportSource, out: Path) -> None:
    """Load ``out`` as transformers will and check the position tables and one forward against mt."""
    transformers = need("transformers", "hf")
    marian = transformers.MarianMTModel.from_pretrained(out).eval()
    for side, stack in (("encoder", source.model.encoder), ("decoder", source.model.decoder)):
        loaded = getattr(marian.model, side).embed_positions.weight
        if not torch.equal(loaded, position_table(stack.embedding)):
            raise ExportError(f"transformers did not load mt's {side} position table from {out}; not exportable")
    src = torch.tensor([[5, 6, 7, EOS_ID]]) % source.tokenizers.src.vocab_size
    tgt = torch.tensor([[BOS_ID, 5, 6]]) % source.tokenizers.tgt.vocab_size
    with torch.inference_mode():
        ours = source.model(src, src == PAD_ID, tgt)
        theirs = marian(input_ids=src, decoder_input_ids=tgt).logits
    if not torch.allclose(ours, theirs, atol=1e-3, rtol=1e-3):
        raise AssertionError(f"exported logits differ from mt's by {float((ours - theirs).abs().max()):.3g}")


@contextmanager
def quiet() -> Iterator[None]:
    """No progress bars while writing and loading, no advice to install sacremoses (never used here)."""
    logging = need("transformers.utils.logging", "hf")
    enabled = logging.is_progress_bar_enabled()
    logging.disable_progress_bar()
    try:
        with warnings.catch_warnings():
            warnings.filterwarnings("ignore", message="Recommended: pip install sacremoses")
            yield
    finally:
        if enabled:
            logging.enable_progress_bar()


def export_hf(ckpt: str | Path, out: str | Path, force: bool = False) -> list[str]:
    """Write the ``MarianMTModel`` directory of checkpoint ``ckpt`` to ``out``; returns notes on differences."""
    need("transformers", "hf")
    source, out = load_source(ckpt), Path(out)
    check_supported(source)
    prepare_output_dir(out, force)
    out.mkdir()
    defaults = search_defaults(source.cfg)
    with removed_on_failure(out), quiet():
        write_weights(source, marian_config(source), out)
        generation_config(source, defaults).save_pretrained(out)
        write_tokenizer(source, out)
        (out / "README.md").write_text(hf_readme(source, defaults), encoding="utf-8")
        verify(source, out)
    return list(defaults.notes)
