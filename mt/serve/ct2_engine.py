"""``Ct2Engine``: serve a CTranslate2 directory written by ``mt-export --to ctranslate2`` through the same API.

The directory holds the model, the SentencePiece model(s) (``spm.model``, or ``src.model`` and
``tgt.model``) and a README whose usage example carries the export's defaults (beam size, ``|Y|^alpha``
penalty, the decoding limit, ``max_input_length``); they are the engine's defaults, and mt-serve's
decoding flags override them. Sources are raw pieces (the model adds ``</s>``), as the README says.
CTranslate2 has one length limit per call, not mt's ``a * |src| + b``, so the export's single limit is
used for every batch (an answer never depends on its batch's longest line), and only the ``length``
penalty (or none) exists: a request or flag asking for ``gnmt`` is refused. An export of several target
languages holds their tags (``>>fr<<``) in its SentencePiece model: those are the languages served, and a
line into ``fr`` is the tokens ``[">>fr<<"] + pieces``.
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Sequence
from pathlib import Path

from mt.config import DecodeConfig, validate_group
from mt.data import Tokenizer, Tokenizers
from mt.data.languages import lang_tag
from mt.decode.align import AlignInput, piece_words, word_links
from mt.decode.translator import line_targets
from mt.errors import UserError
from mt.serve.engine import LinesDone, Options, Output, resolve

# what the export's README example sets (mt.export.readme.ct2_readme)
README_DEFAULTS = {"beam_size": int, "length_penalty": float, "max_decoding_length": int, "max_input_length": int}


def readme_defaults(directory: Path) -> dict[str, int | float]:
    """The keyword arguments of the README's ``translate_batch`` example ({} if there is no README)."""
    readme = directory / "README.md"
    text = readme.read_text(encoding="utf-8") if readme.is_file() else ""
    found: dict[str, int | float] = {}
    for name, kind in README_DEFAULTS.items():
        match = re.search(rf"^\s*{name}=([0-9.]+),", text, re.MULTILINE)
        if match is not None:
            found[name] = kind(match.group(1))
    return found


TAG = re.compile(r">>(.+)<<")


def tag_languages(tokenizer: Tokenizer) -> list[str]:
    """The target languages whose tags (``>>fr<<``) are pieces of ``tokenizer``, in its order."""
    pieces = (tokenizer.id_to_piece(i) for i in range(tokenizer.vocab_size))
    return [m.group(1) for m in map(TAG.fullmatch, pieces) if m is not None]


def served_targets(tokenizer: Tokenizer, target_lang: str | None) -> tuple[list[str], bool]:
    """(target languages, tagged): the export's tag languages, else ``target_lang`` (default ``de``)."""
    tagged = tag_languages(tokenizer)
    if not tagged:
        return [target_lang or "de"], False
    if target_lang is not None and target_lang not in tagged:
        raise UserError(f"--target-lang {target_lang}: this export translates into {', '.join(tagged)}")
    return tagged, True


class Ct2Engine:
    """A CTranslate2 translator with the export's tokenizers; one worker thread calls ``translate``."""

    def __init__(self, directory: Path, translator, tokenizers: Tokenizers, defaults: DecodeConfig,
                 max_src_len: int, max_decoding_length: int, source_lang: str, target_langs: list[str],
                 tagged: bool = False) -> None:
        self.directory, self.description = directory, f"{directory} (CTranslate2)"
        self.translator, self.tokenizers, self.defaults = translator, tokenizers, defaults
        self._max_src_len, self.max_decoding_length = max_src_len, max_decoding_length
        self.source_lang, self.target_langs, self.tagged = source_lang, target_langs, tagged
        tgt = tokenizers.tgt
        self._piece_ids = {tgt.id_to_piece(i): i for i in range(tgt.vocab_size)}

    @classmethod
    def load(
        cls, directory: Path, overrides: dict, threads: int, source_lang: str, target_lang: str | None
    ) -> Ct2Engine:
        """The export in ``directory``; ``overrides`` (DecodeConfig fields, from flags) override the README's.

        ``target_lang`` names a one-target export's language; an export of several serves its tags' languages.
        """
        import ctranslate2

        if not (directory / "model.bin").is_file():
            raise UserError(f"--ct2 {directory}: no model.bin (a directory written by mt-export --to ctranslate2?)")
        if not Tokenizers.exists(directory):
            raise UserError(f"--ct2 {directory}: no spm.model (or src.model and tgt.model) beside the model")
        found = readme_defaults(directory)
        missing = sorted(set(README_DEFAULTS) - set(found))
        if missing:
            names = ", ".join(missing)
            raise UserError(f"--ct2 {directory}: README.md does not give {names} (re-export with mt-export)")
        readme = {"strategy": "beam", "beam_size": found["beam_size"], "length_penalty": "length",
                  "alpha": found["length_penalty"]}
        defaults = validate_group("decode", dataclasses.replace(DecodeConfig(), **{**readme, **overrides}))
        translator = ctranslate2.Translator(str(directory), device="cpu", intra_threads=threads, inter_threads=1)
        max_src_len = int(found["max_input_length"]) - 1  # the model's positions hold the pieces and </s>
        tokenizers = Tokenizers.load(directory)
        targets, tagged = served_targets(tokenizers.src, target_lang)
        engine = cls(directory, translator, tokenizers, defaults, max_src_len,
                     int(found["max_decoding_length"]), source_lang, targets, tagged)
        engine.settings(Options())  # the defaults themselves must be servable
        return engine

    @staticmethod
    def languages(directory: Path, source_lang: str | None, target_lang: str | None) -> tuple[str, list[str], bool]:
        """(source, targets, tagged) of the export in ``directory`` without loading the model (its tokenizers
        only): the tags' languages, else ``target_lang`` (default de); the source ``source_lang`` (default en)."""
        if not (directory / "model.bin").is_file():
            raise UserError(f"--ct2 {directory}: no model.bin (a directory written by mt-export --to ctranslate2?)")
        if not Tokenizers.exists(directory):
            raise UserError(f"--ct2 {directory}: no spm.model (or src.model and tgt.model) beside the model")
        targets, tagged = served_targets(Tokenizers.load(directory).src, target_lang)
        return source_lang or "en", targets, tagged

    @property
    def parameters(self) -> None:
        return None  # CTranslate2 does not tell

    @property
    def max_src_len(self) -> int:
        return self._max_src_len

    @property
    def on_too_long(self) -> str:
        return self.defaults.on_too_long

    def settings(self, options: Options) -> DecodeConfig:
        cfg = resolve(self.defaults, options)
        if cfg.length_penalty == "gnmt" and cfg.strategy == "beam":
            raise UserError("CTranslate2 has no GNMT length penalty: use length (|Y|^alpha) or none")
        return cfg

    def count_pieces(self, line: str, target: str | None = None) -> int:
        return len(self._tag(target)) + len(self.tokenizers.src.encode(line)) if line.strip() else 0

    @staticmethod
    def _tag(target: str | None) -> list[str]:
        return [lang_tag(target)] if target is not None else []

    def _pieces(self, line: str, target: str | None) -> list[str]:
        """``[tag] + pieces``, truncated as mt truncates (a rejected line never gets here)."""
        pieces = [self.tokenizers.src.id_to_piece(i) for i in self.tokenizers.src.encode(line)]
        return (self._tag(target) + pieces)[: self._max_src_len]

    def search_options(self, cfg: DecodeConfig) -> dict:
        """``translate_batch`` keyword arguments for ``cfg``."""
        options = {"max_decoding_length": self.max_decoding_length, "min_decoding_length": cfg.min_len,
                   "return_scores": True}
        if cfg.strategy == "sample":
            return {**options, "beam_size": 1, "sampling_topk": cfg.top_k, "sampling_topp": cfg.top_p,
                    "sampling_temperature": cfg.temperature}
        beam = cfg.beam_size if cfg.strategy == "beam" else 1
        alpha = cfg.alpha if cfg.length_penalty == "length" and beam > 1 else 0.0
        return {**options, "beam_size": beam, "num_hypotheses": cfg.nbest if beam > 1 else 1, "length_penalty": alpha}

    def translate(
        self, lines: Sequence[str], options: Options, targets: Sequence[str | None] | None = None,
        on_done: LinesDone | None = None, align: Sequence[bool] | None = None,
    ) -> list[Output]:
        """The outputs of ``lines`` from one ``translate_batch`` call (CTranslate2 sorts and batches them
        itself), so ``on_done`` hears of every line at the end; the ``align`` lines get word links from
        CTranslate2's attention (``return_attention``: its alignment heads, the export's default)."""
        outputs = self._translate(lines, options, targets, align)
        if on_done is not None:
            on_done(list(enumerate(outputs)))
        return outputs

    def _translate(self, lines: Sequence[str], options: Options, targets: Sequence[str | None] | None,
                   align: Sequence[bool] | None = None) -> list[Output]:
        todo = [i for i, line in enumerate(lines) if line.strip()]
        outputs = [Output([], [], 0, 0) for _ in lines]
        if not todo:
            return outputs
        targets = line_targets(targets, len(lines))  # as the Translator reads them
        sources = [self._pieces(lines[i], targets[i]) for i in todo]
        attention = align is not None and any(align)
        results = self.translator.translate_batch(sources, **self.search_options(self.settings(options)),
                                                  return_attention=attention)
        tgt = self.tokenizers.tgt
        for i, source, result in zip(todo, sources, results, strict=True):
            texts = [tgt.decode(self._piece_ids[p] for p in hyp) for hyp in result.hypotheses]
            ids = [self._piece_ids[p] for p in result.hypotheses[0]]
            links = self._links(lines[i], targets[i], ids, result.attention[0]) if attention and align[i] else None
            outputs[i] = Output(texts, list(result.scores), len(source), len(result.hypotheses[0]) + 1, links)
        return outputs

    def _links(self, line: str, target: str | None, tgt_ids: list[int], weights: list) -> list[tuple[int, int]]:
        """Word links of ``line`` and its translation ``tgt_ids`` from CTranslate2's attention (T, S)."""
        import torch

        prefix = len(self._tag(target))
        ids, spans = self.tokenizers.src.encode_with_spans(line)
        src_words = ([-1] * prefix + piece_words(line, spans))[: self._max_src_len]
        text, tgt_spans = self.tokenizers.tgt.decode_with_spans(tgt_ids)
        pair = AlignInput([0] * len(src_words), src_words, tgt_ids, piece_words(text, tgt_spans), prefix)
        matrix = torch.zeros(len(tgt_ids) + 1, len(src_words) + 1)  # (T+1, S+1), as mt.decode.align's
        found = torch.tensor(weights, dtype=torch.float32)[: len(tgt_ids), : len(src_words)]
        matrix[: found.shape[0], : found.shape[1]] = found
        return word_links(matrix, pair, shift=False)
