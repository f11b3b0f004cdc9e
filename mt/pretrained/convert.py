"""``import_hf``: a Hugging Face model directory in, an mt checkpoint out (checked by loading it back).

Languages: a Marian model translates one pair (``data.src_lang`` - ``data.tgt_lang``). A model with language codes
(M2M-100, NLLB) translates between any two of its languages; the checkpoint lists them in ``data.pairs`` as every
language from and into one source (``en-de`` first, the default pair, then ``en-X`` and ``X-en`` for every other
code X): each code is a source and a target language of the checkpoint (``mt.data.languages``), in as many pairs
as languages (twice), with no field mt's own models lack.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

from torch import Tensor

from mt.checkpoint import save_checkpoint, tokenizers_state
from mt.config import Config, DataConfig, DecodeConfig, ModelConfig, TrainConfig, to_dict, validate
from mt.data import Tokenizers
from mt.model import Seq2SeqTransformer, build_model
from mt.pretrained.files import HFDirectory, PretrainedError
from mt.pretrained.m2m100 import import_m2m100
from mt.pretrained.marian import import_marian

# config.json model_type -> what is imported (NLLB-200's dense models are m2m_100 too)
ARCHITECTURES = {"marian": "MarianMTModel", "m2m_100": "M2M100ForConditionalGeneration"}
IMPORTERS = {"marian": import_marian, "m2m_100": import_m2m100}
ENGLISH = ("en", "eng_Latn")  # the default source of a model with language codes, where it has one
TARGET_TAG = re.compile(r">>([A-Za-z_]+)<<")  # an OPUS-MT model's target tag, e.g. >>fra<<
OPUS_MT_NAME = re.compile(r"opus-mt-([a-z]{2,3})-([a-z]{2,3})$", re.IGNORECASE)


@dataclass(frozen=True)
class ImportReport:
    """What ``import_hf`` wrote: the checkpoint, the family, the config it runs with, its size."""

    out: Path
    architecture: str
    cfg: Config
    parameters: int


def stated_languages(directory: HFDirectory) -> tuple[str | None, str | None]:
    """The pair a Marian directory states: ``tokenizer_config.json``'s ``source_lang`` / ``target_lang``, else an
    OPUS-MT directory name's (``opus-mt-en-de``); None where neither says."""
    tokenizer_config = directory.json("tokenizer_config.json")
    named = OPUS_MT_NAME.search(directory.path.resolve().name)
    return (tokenizer_config.get("source_lang") or (named and named.group(1)) or None,
            tokenizer_config.get("target_lang") or (named and named.group(2)) or None)


def languages(directory: HFDirectory, source: str | None, target: str | None) -> tuple[str, str]:
    """The language pair: given, else the one the directory states (``stated_languages``)."""
    stated = stated_languages(directory)
    source, target = source or stated[0], target or stated[1]
    if not source or not target:
        missing = " and ".join(flag for flag, v in (("--source-lang", source), ("--target-lang", target)) if not v)
        raise PretrainedError(f"{directory.path} does not say which languages it translates; give {missing}")
    return source, target


def coded_languages(directory: HFDirectory, codes: list[str], source: str | None, target: str | None,
                    ) -> tuple[str, str, list[str]]:
    """A model with language ``codes``: its default pair (given, else ``tokenizer_config.json``'s ``src_lang`` /
    ``tgt_lang``, else English (or its first language) into its first other language) and its ``data.pairs``, every
    language from and into the default source (see the module doc)."""
    tokenizer_config = directory.json("tokenizer_config.json")
    english = [lang for lang in ENGLISH if lang in codes]
    source = source or tokenizer_config.get("src_lang") or (english or codes)[0]
    target = target or tokenizer_config.get("tgt_lang") or next((c for c in codes if c != source), source)
    for flag, lang in (("--source-lang", source), ("--target-lang", target)):
        if lang not in codes:
            have = ", ".join(codes[:8]) + (f" and {len(codes) - 8} more" if len(codes) > 8 else "")
            raise PretrainedError(f"{directory.path}: {flag} {lang}: not one of the model's language codes ({have})")
    if source == target:
        raise PretrainedError(f"{directory.path}: --source-lang and --target-lang are both {source}")
    others = [lang for lang in codes if lang != source]
    into = [f"{source}-{x}" for x in [target, *(x for x in others if x != target)]]
    return source, target, into + [f"{x}-{source}" for x in others]


def tagged_languages(directory: HFDirectory, tags: list[str], source: str | None, target: str | None,
                     ) -> tuple[str, str, list[str]]:
    """An OPUS-MT model of several targets (``>>fra<<`` pieces): its source (given, ``tokenizer_config.json``'s, or
    the directory name's) and a pair into each tagged language, the default (``target``, else the first) first."""
    source = source or stated_languages(directory)[0]
    if not source:
        raise PretrainedError(f"{directory.path} does not say which language it translates from; give --source-lang")
    if target is not None and target not in tags:
        raise PretrainedError(f"{directory.path}: --target-lang {target}: the model's target tags are "
                              f"{', '.join(tags)}")
    target = target or tags[0]
    return source, target, [f"{source}-{t}" for t in [target, *(t for t in tags if t != target)]]


def target_tags(tokenizer) -> list[str]:
    """The languages of a vocabulary's ``>>xx<<`` pieces (OPUS-MT's target tags), in vocabulary order."""
    return [m.group(1) for piece in getattr(tokenizer, "vocab", []) if (m := TARGET_TAG.fullmatch(piece))]


def data_config(directory: HFDirectory, tokenizers: Tokenizers, max_len: int, source: str | None,
                target: str | None) -> DataConfig:
    """The checkpoint's ``data`` group: its languages (module doc) and source length limit."""
    codes = list(tokenizers.src.language_codes)
    if not codes and len(tags := target_tags(tokenizers.src)) > 1:
        src_lang, tgt_lang, pairs = tagged_languages(directory, tags, source, target)
        return DataConfig(source="files", src_lang=src_lang, tgt_lang=tgt_lang, pairs=pairs, joint_vocab=True,
                          max_len=max_len)
    if not codes:
        src_lang, tgt_lang = languages(directory, source, target)
        return DataConfig(source="files", src_lang=src_lang, tgt_lang=tgt_lang, joint_vocab=False, max_len=max_len)
    src_lang, tgt_lang, pairs = coded_languages(directory, codes, source, target)
    return DataConfig(source="files", src_lang=src_lang, tgt_lang=tgt_lang, pairs=pairs, joint_vocab=True,
                      max_len=max_len)


def decode_config(directory: HFDirectory) -> DecodeConfig:
    """mt's search defaults with ``generation_config.json``'s beam size and length penalty (|Y|^alpha)."""
    generation = directory.json("generation_config.json") or directory.config
    beams = int(generation.get("num_beams", 4) or 1)
    alpha = float(generation.get("length_penalty", 1.0))
    return DecodeConfig(strategy="beam" if beams > 1 else "greedy", beam_size=max(beams, 1),
                        length_penalty="length", alpha=alpha)


def import_hf(path: str | Path, out: str | Path, *, source_lang: str | None = None,
              target_lang: str | None = None, force: bool = False) -> ImportReport:
    """Write the mt checkpoint of the Hugging Face model directory ``path`` to ``out``."""
    directory, out = HFDirectory.open(path), Path(out)
    if out.exists() and not force:
        raise PretrainedError(f"{out} already exists; pass --force to replace it")
    model_type = directory.config.get("model_type")
    if model_type not in ARCHITECTURES:
        known = ", ".join(f"{v} ({k})" for k, v in ARCHITECTURES.items())
        raise PretrainedError(f"{directory.path / 'config.json'}: model_type={model_type!r}; mt imports {known}")
    model, state, tokenizers = IMPORTERS[model_type](directory)
    cfg = validate(Config(
        name=out.stem,
        data=data_config(directory, tokenizers, model.max_positions - 1, source_lang, target_lang),
        model=model,
        train=TrainConfig(run_dir=str(Path("runs") / out.stem)),
        decode=decode_config(directory),
    ))
    net = built(model, state, tokenizers)
    save_checkpoint(out, {
        "model": net.state_dict(), "config": to_dict(cfg), "tokenizers": tokenizers_state(tokenizers),
        "imported_from": {"architecture": ARCHITECTURES[model_type], "directory": directory.path.name},
    })
    return ImportReport(out, ARCHITECTURES[model_type], cfg, sum(p.numel() for p in net.parameters()))


def built(model: ModelConfig, state: dict[str, Tensor], tokenizers: Tokenizers) -> Seq2SeqTransformer:
    """mt's model of ``model`` holding ``state``: every weight it has is given, and nothing else."""
    net = build_model(model, tokenizers.src.padded_vocab_size, tokenizers.tgt.padded_vocab_size)
    missing, unexpected = net.load_state_dict(state, strict=False)
    tied = {"encoder.embedding.token.weight"} if model.share_all_embeddings else set()
    if unexpected or set(missing) - tied:
        raise AssertionError(f"imported weights do not fit: missing {missing}, unexpected {unexpected}")
    return net


def model_summary(model: ModelConfig) -> str:
    """One line on the imported architecture's options."""
    return (f"{model.encoder_layers}+{model.decoder_layers} layers, d_model {model.d_model}, "
            f"{model.heads} heads, FFN {model.d_ff} {model.activation}, positions {model.positions}"
            + (f" ({model.sinusoid}" + (f", from {model.position_offset}" if model.position_offset else "") + ")"
               if model.positions == "sinusoidal" else "")
            + (", Pre-LN" if model.pre_ln else "")
            + (", logits bias" if model.logits_bias else ""))
