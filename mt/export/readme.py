"""The README.md written into each exported directory: how to translate with it, and what differs from mt."""

from __future__ import annotations

from mt.data.languages import data_pairs, is_multilingual, lang_tag, target_languages
from mt.export.common import ExportSource, SearchDefaults


def _origin(source: ExportSource) -> str:
    m, tok = source.cfg.model, source.tokenizers
    vocab = f"joint vocabulary of {tok.src.vocab_size}" if tok.joint else (
        f"vocabularies of {tok.src.vocab_size} (source) and {tok.tgt.vocab_size} (target)"
    )
    kv_heads = f" ({m.kv_heads} key/value heads)" if m.kv_heads not in (0, m.heads) else ""
    sinusoid = f" ({m.sinusoid})" if m.positions == "sinusoidal" and m.sinusoid != "fairseq" else ""
    extras = "".join(f", {what}" for what, on in (("unscaled embeddings", not m.scale_embeddings),
                                                    ("logits bias", m.logits_bias)) if on)
    return (
        f"Exported by `mt-export` from `{source.path}`: {m.encoder_layers}+{m.decoder_layers} layers, "
        f"d_model {m.d_model}, {m.heads} heads{kv_heads}, {'Pre' if m.pre_ln else 'Post'}-LN ({m.norm}), "
        f"{m.activation}, "
        f"{m.positions} positions{sinusoid} (up to {m.max_positions}){extras}, {vocab} "
        f"({', '.join(f'{p.src} -> {p.tgt}' for p in data_pairs(source.cfg.data))})."
    )


def _targets(source: ExportSource, how: str) -> str:
    """For a model of several target languages: which, and how to ask for one (empty otherwise)."""
    if not is_multilingual(source.cfg.data):
        return ""
    targets = target_languages(source.cfg.data)
    tags = ", ".join(f"`{lang_tag(t)}`" for t in targets)
    return (
        f"\n\nTarget languages: {', '.join(targets)}. A source names its target with a tag first, "
        f"{tags} (each a vocabulary piece of its own, never split): {how}. `mt-translate --target-lang "
        f"{targets[-1]}` adds the same tag."
    )


def _example_tag(source: ExportSource) -> str:
    """The example's tag: the last target language's (``""`` for a model of one target)."""
    return lang_tag(target_languages(source.cfg.data)[-1]) if is_multilingual(source.cfg.data) else ""


def _language_codes(source: ExportSource) -> list[str]:
    """An M2M-100 / NLLB model's code pieces (``__en__``, ``eng_Latn``), those of its first pair first (the
    example's source and target); [] for any other model."""
    codes = source.tokenizers.src.language_codes
    if not codes:
        return []
    pair = data_pairs(source.cfg.data)[0]
    first = [source.tokenizers.src.id_to_piece(codes[lang]) for lang in (pair.src, pair.tgt)]
    return first + sorted(source.tokenizers.src.id_to_piece(i) for i in codes.values()
                          if source.tokenizers.src.id_to_piece(i) not in first)


def _codes_note(codes: list[str]) -> str:
    shown = ", ".join(f"`{c}`" for c in codes[:6]) + (f" ... ({len(codes)} codes)" if len(codes) > 6 else "")
    return (f"Language codes ({shown}): a source is its language's code then its pieces, and each translation "
            "starts with the target's code, given as `target_prefix` and left out of the text (`hypotheses[0][1:]`); "
            "`max_decoding_length` counts that code. mt forces the code and scores it 0, CTranslate2 adds its "
            "log-prob to each hypothesis of the line alike (the ranking is the same).")


def _notes(lines: list[str]) -> str:
    return "\n".join(f"- {line}" for line in lines)


def ct2_readme(source: ExportSource, defaults: SearchDefaults, quantization: str | None) -> str:
    """Usage with the checkpoint's decoding defaults, for a CTranslate2 directory."""
    src_model, tgt_model = ("spm.model", "spm.model") if source.tokenizers.joint else ("src.model", "tgt.model")
    codes = _language_codes(source)
    decoding = defaults.max_output_pieces + (1 if codes else 0)  # the target's code comes first, counted
    lines = [
        "Sources are raw SentencePiece pieces: the model config adds `</s>` (`add_source_eos`) and starts "
        "decoding from `<s>`, as mt does.",
        f"`max_decoding_length={decoding}` is mt's limit in pieces{' (and the code)' if codes else ''}; at that "
        "limit mt forces "
        "`</s>` (same pieces; a beam hypothesis cut there is scored without the `</s>` log-prob).",
        "`length_penalty` is `|Y|^alpha` with |Y| counting `</s>`, mt's `length` penalty. With "
        "`length_penalty=0` beam search stops when the best candidate is `</s>`, as mt does; with a penalty "
        "it stops once `beam_size` hypotheses are finished (mt still stops at the best candidate's `</s>`), "
        "so a few outputs can differ.",
        "PAD and BOS are banned by a -1e4 output bias and the embedding's padding rows are left out, so "
        "their probability is renormalised onto the other tokens (mt bans them after its softmax): greedy "
        "outputs are mt's; each beam step's log-probs shift by `-log(1 - p(banned))`."
        + (" The model's logits bias is that output bias (its `-inf` ids at -1e4 too)." if source.cfg.model.logits_bias
           else ""),
        "mt answers an empty line with an empty line without decoding it; skip empty lines likewise.",
        *defaults.notes,
    ]
    if codes:
        lines.insert(1, _codes_note(codes))
    tag = codes[0] if codes else _example_tag(source)
    tokens = f'["{tag}"] + ' if tag else ""
    prefix = f'\n    target_prefix=[["{codes[1]}"]] * len(lines),  # the target language\'s code' if codes else ""
    how = f'the tokens of a line into {tag[2:-2]} are `["{tag}"] + pieces`'
    return f"""# CTranslate2 model

{_origin(source)} Weights: {quantization or 'as stored (float32)'}.{"" if codes else _targets(source, how)}

```python
import ctranslate2
import sentencepiece as spm

source_sp = spm.SentencePieceProcessor(model_file="{src_model}")
target_sp = spm.SentencePieceProcessor(model_file="{tgt_model}")
translator = ctranslate2.Translator(".", device="cpu")  # this directory
lines = ["..."]
results = translator.translate_batch(
    [{tokens}source_sp.encode(line, out_type=str) for line in lines],
    beam_size={defaults.beam_size},
    length_penalty={defaults.length_penalty},
    max_decoding_length={decoding},
    max_input_length={source.cfg.model.max_positions},  # pieces + </s>{prefix}
)
print([target_sp.decode(result.hypotheses[0]{"[1:]" if codes else ""}) for result in results])
```

What differs from `mt-translate` with the checkpoint's settings:

{_notes(lines)}
"""


def position_note(source: ExportSource) -> str:
    """What the stored position table is, and what transformers' own ``save_pretrained`` does to it."""
    m = source.cfg.model
    if m.positions == "sinusoidal" and m.sinusoid == "marian":
        return ("The position table is Marian's own sinusoids (as mt computes them), stored in `model.safetensors`; "
                "a model re-saved by transformers' `save_pretrained` recomputes the same table.")
    return ("The position table is mt's (fairseq's sinusoid frequencies, or learned positions), stored in "
            "`model.safetensors`. transformers' `save_pretrained` leaves Marian's position tables out and a "
            "model re-saved that way gets Marian's own sinusoids back (other frequencies): re-export from the mt "
            "checkpoint instead, or copy the two `embed_positions` tensors into the new file.")


def hf_readme(source: ExportSource, defaults: SearchDefaults) -> str:
    """Usage with the checkpoint's decoding defaults, for a Hugging Face MarianMTModel directory."""
    lines = [
        position_note(source),
        "`length_penalty` is `|Y|^alpha` with |Y| counting `</s>`, mt's `length` penalty. transformers' "
        "beam search keeps `num_beams` finished hypotheses and stops by its `early_stopping` heuristic; mt "
        "stops when the best candidate is `</s>`, so a few beam outputs can differ. Greedy is mt's.",
        "PAD, BOS and the embedding's padding ids are `suppress_tokens`; `</s>` is forced at `max_length`, "
        "as mt forces it.",
        *(["`final_logits_bias` is the model's logits bias as mt holds it, `-inf` on the ids the original "
           "model has no output for (`<s>`, a copy of the row it starts decoding from)."]
          if source.cfg.model.logits_bias else []),
        "`skip_special_tokens=True` drops `<unk>` (mt writes it as ` ⁇ `) and the output is stripped of "
        "leading and trailing spaces.",
        "The `translation` pipeline was removed in transformers 5; use `generate` as above.",
        *defaults.notes,
    ]
    tag = _example_tag(source)
    how = (
        f"`MarianTokenizer` turns a leading `{tag}` into that piece and encodes the rest of the line "
        f"(`source.spm` drops the space after the tag, and runs of spaces, which mt keeps)"
    )
    return f"""# Hugging Face MarianMTModel

{_origin(source)}{_targets(source, how)}

```python
from transformers import MarianMTModel, MarianTokenizer

tokenizer = MarianTokenizer.from_pretrained(".")  # this directory; AutoTokenizer works too
model = MarianMTModel.from_pretrained(".").eval()
lines = ["{tag + ' ' if tag else ''}..."]
batch = tokenizer(lines, return_tensors="pt", padding=True)  # pieces + </s>
output = model.generate(**batch)  # generation_config.json: num_beams={defaults.beam_size}, ...
print(tokenizer.batch_decode(output, skip_special_tokens=True))
```

What differs from `mt-translate` with the checkpoint's settings:

{_notes(lines)}
"""
