"""Language pairs and target-language tags: one model, several target languages.

A multilingual model (Johnson et al. 2017) reads a tag naming the target language before its source:
the source pieces of "A dog runs." into French are ``[id(">>fr<<")] + encode("A dog runs.")``. The tag
is a user-defined SentencePiece piece, so no text ever splits it (the Marian / OPUS-MT convention, which
Hugging Face's ``MarianTokenizer`` and CTranslate2 users follow by putting ``>>fr<<`` first), and it is
added to the ids, never to the text, so it is added exactly once. A model is multilingual, and its
sources carry tags, when its pairs have more than one target language; a one-pair model has no tags.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass

from mt.config import DataConfig
from mt.errors import UserError

_LANG = re.compile(r"[a-z]{2,3}(_[A-Za-z0-9]+)?")


class LanguageError(UserError):
    """A language pair or target language the config or the model does not have."""


@dataclass(frozen=True)
class LanguagePair:
    """One translation direction, ``src`` -> ``tgt`` (language codes such as ``en``, ``de``)."""

    src: str
    tgt: str

    @property
    def name(self) -> str:
        return f"{self.src}-{self.tgt}"


def lang_tag(lang: str) -> str:
    """The source-side piece that asks for target language ``lang``: ``>>fr<<``."""
    return f">>{lang}<<"


def parse_pair(text: str) -> LanguagePair:
    """``"en-de"`` -> ``LanguagePair("en", "de")``; ``LanguageError`` for anything else."""
    parts = text.split("-") if isinstance(text, str) else []
    if len(parts) != 2 or not all(_LANG.fullmatch(p) for p in parts) or parts[0] == parts[1]:
        raise LanguageError(f"data.pairs: {text!r} is not a language pair like en-de (two different codes)")
    return LanguagePair(*parts)


def parse_pairs(pairs: Sequence[str]) -> list[LanguagePair]:
    """Every pair of ``data.pairs``, in order; ``LanguageError`` for a bad or repeated one."""
    parsed = [parse_pair(p) for p in pairs]
    names = [p.name for p in parsed]
    repeated = sorted({n for n in names if names.count(n) > 1})
    if repeated:
        raise LanguageError(f"data.pairs lists {', '.join(repeated)} more than once")
    return parsed


def data_pairs(cfg: DataConfig) -> list[LanguagePair]:
    """The pairs a data config trains: ``data.pairs`` when given, else ``src_lang``-``tgt_lang``."""
    if cfg.pairs:
        return parse_pairs(cfg.pairs)
    return [LanguagePair(cfg.src_lang, cfg.tgt_lang)]


def target_languages(cfg: DataConfig) -> list[str]:
    """The distinct target languages, in the order of the pairs."""
    return list(dict.fromkeys(p.tgt for p in data_pairs(cfg)))


def source_languages(cfg: DataConfig) -> list[str]:
    """The distinct source languages, in the order of the pairs."""
    return list(dict.fromkeys(p.src for p in data_pairs(cfg)))


def is_multilingual(cfg: DataConfig) -> bool:
    """Whether sources carry a target-language tag: more than one target language."""
    return len(target_languages(cfg)) > 1


def tag_pieces(cfg: DataConfig) -> list[str]:
    """The user-defined pieces the tokenizer must hold: one tag per target language, or none."""
    return [lang_tag(t) for t in target_languages(cfg)] if is_multilingual(cfg) else []


def check_target(cfg: DataConfig, lang: str | None) -> str | None:
    """The target language to ask for: ``lang`` checked against the model's, or None for a one-target model.

    A multilingual model needs one (``LanguageError`` naming its languages); a one-target model accepts
    its own target or None.
    """
    targets = target_languages(cfg)
    have = ", ".join(targets)
    if lang is None:
        if is_multilingual(cfg):
            raise LanguageError(f"this model translates into {have}: choose one (--target-lang)")
        return None
    if lang not in targets:
        raise LanguageError(f"target language {lang!r} is not one of this model's: {have}")
    return lang if is_multilingual(cfg) else None
