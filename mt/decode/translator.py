"""``Translator``: text lines in, translations out, batched by tokens and returned in input order.

Per call: tokenize every line (an empty or all-whitespace line is answered with an empty line and
never reaches the model), truncate or reject sources longer than ``max_src_len`` pieces, sort by
length so batches hold similar lengths (little padding), cut batches with ``mt.data.batch_by_tokens``
under ``cfg.max_tokens`` (source tokens incl. EOS x rows per sentence, i.e. x beam for beam search) and
``cfg.max_sentences``, decode each with ``mt.decode.search``, and put the results back in input order.
Where ``cfg.refill`` names the strategy, up to ``POOL_BATCHES`` batches are decoded in one search call
whose sentences join as others finish (continuous batching, ``mt.decode.refill``). ``on_batch`` hears of
each batch as it is done, or with refill of lines as they end (a server answers a request once its
lines are).

Languages: a multilingual mt model (or Marian's) reads a target tag before its source (``>>fr<<``,
``mt.data.languages``); a model with language codes (M2M-100, NLLB: ``VocabTokenizer.language_codes``) reads
its source language's code before the source and writes the target language's code first, which the search
forces (``forced`` in ``mt.decode.search``: scored 0, left out of the output).
"""

from __future__ import annotations

import contextlib
import sys
import warnings
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

import torch
from torch import Tensor
from tqdm import tqdm

from mt.config import DecodeConfig
from mt.data import batch_by_tokens
from mt.data.languages import LanguageError, lang_tag
from mt.decode.align import ALIGN_LAYER, SHIFT, AlignInput, EncoderRows, Link, align_batch, piece_words
from mt.decode.common import EOS_ID, PAD_ID, Hypothesis
from mt.decode.length_penalty import check_penalty
from mt.decode.search import check_strategy, rows_per_sentence, search
from mt.decode.stopping import check_stopping
from mt.errors import UserError

if TYPE_CHECKING:
    from mt.decode.processes import DecodingProcesses

POOL_BATCHES = 16  # batches a refilling search takes at once (progress and ``on_batch`` after each pool)


@dataclass
class Translation:
    """The n-best of one input line, best first (both lists empty for an empty line)."""

    hypotheses: list[Hypothesis]
    texts: list[str]  # detokenized hypotheses, same order
    src_tokens: int  # source pieces fed to the model (after truncation), EOS excluded

    @property
    def text(self) -> str:
        return self.texts[0] if self.texts else ""

    @property
    def tgt_tokens(self) -> int:
        """Tokens the model generated for the best hypothesis: its pieces plus EOS (0 for an empty line)."""
        return len(self.hypotheses[0].tokens) + 1 if self.hypotheses else 0


def collate_sources(sources: Sequence[list[int]], device: torch.device | str) -> tuple[Tensor, Tensor]:
    """``pieces + [EOS]`` per sentence, right-padded: -> src (B, S) long, src_pad_mask (B, S) bool."""
    width = max(len(ids) for ids in sources) + 1
    src = torch.full((len(sources), width), PAD_ID, dtype=torch.long)
    for row, ids in enumerate(sources):
        src[row, : len(ids) + 1] = torch.tensor([*ids, EOS_ID], dtype=torch.long)
    src = src.to(device)
    return src, src == PAD_ID


Targets = str | Sequence[str | None] | None  # one target language for every line, one per line, or none
BatchDone = Callable[[list[tuple[int, "Translation"]]], None]  # (line index, its translation) of a finished batch


def line_targets(target_lang: Targets, count: int) -> list[str | None]:
    """The target language of each of ``count`` lines (None: no tag)."""
    if target_lang is None or isinstance(target_lang, str):
        return [target_lang] * count
    if len(target_lang) != count:
        raise ValueError(f"{len(target_lang)} target languages for {count} lines")
    return list(target_lang)


class Translator:
    """Translate text with a trained model (in eval mode while translating, under inference_mode).

    Args:
        model: a ``Seq2SeqTransformer`` (or anything with its encode/new_cache/decode); None with ``processes``.
        tokenizers: ``mt.data.Tokenizers``; ``src.encode`` and ``tgt.decode`` are used.
        cfg: search settings (strategy, beam, length penalty, limits, batching budget).
        device: where the model runs.
        max_positions: the model's position limit (``ModelConfig.max_positions``); caps output lengths.
        max_src_len: longest source in pieces (EOS excluded); default ``max_positions - 1``, or no limit.
        processes: decoding processes (``mt.decode.processes``), each holding the model: this process
            then only encodes the lines and gathers the translations.
        source_lang: the source language of a model with language codes (M2M-100, NLLB), whose code starts every
            source unless a call names another; other models do not read it.
    """

    def __init__(
        self,
        model: torch.nn.Module | None,
        tokenizers,
        cfg: DecodeConfig,
        device: torch.device | str = "cpu",
        *,
        max_positions: int | None = None,
        max_src_len: int | None = None,
        processes: DecodingProcesses | None = None,
        source_lang: str | None = None,
    ) -> None:
        check_strategy(cfg.strategy)
        check_penalty(cfg.length_penalty)
        check_stopping(cfg.stopping)
        if cfg.on_too_long not in ("truncate", "reject"):
            raise ValueError(f"on_too_long must be truncate or reject, got {cfg.on_too_long!r}")
        if model is None and processes is None:
            raise ValueError("a Translator needs a model, or processes that hold one")
        self.model = model.to(device) if model is not None else None
        self.processes = processes
        self.tokenizers = tokenizers
        self.cfg = cfg
        self.device = torch.device(device)
        self.max_positions = max_positions
        if max_src_len is None and max_positions is not None:
            max_src_len = max_positions - 1  # the source's EOS takes a position too
        self.max_src_len = max_src_len
        self.source_lang = source_lang
        self._codes: dict[str, int] = tokenizers.src.language_codes  # language -> its code's id

    def close(self) -> None:
        """Stop the decoding processes, if any (``contextlib.closing`` calls this)."""
        if self.processes is not None:
            self.processes.close()

    def translate(self, lines: Sequence[str], progress: bool = False, target_lang: Targets = None,
                  source_lang: str | None = None) -> list[str]:
        """The best translation of every line, in input order (empty line -> empty line).

        ``target_lang`` (a multilingual model's target, e.g. ``fr``) puts its tag before every source (a model
        with language codes: its code first in every output); a sequence of them (one per line) asks each line
        for its own target, in one batch. ``source_lang``: the source's code, for a model with language codes
        (default: the translator's ``source_lang``).
        """
        return [t.text for t in self.translate_nbest(lines, progress, target_lang, scores=False,
                                                     source_lang=source_lang)]

    def translate_nbest(
        self, lines: Sequence[str], progress: bool = False, target_lang: Targets = None,
        on_batch: BatchDone | None = None, scores: bool = True, source_lang: str | None = None,
        encoder_rows: EncoderRows | None = None,
    ) -> list[Translation]:
        """n-best hypotheses (``cfg.nbest``; 1 for greedy/sample) with scores and token counts per line.

        ``on_batch`` (if given) gets the lines of each decoded batch as soon as it is done (with refill,
        ``cfg.refill``: lines as they end), empty lines first; every line is in exactly one call.
        ``scores=False``: greedy search skips the log-softmax, and its hypotheses' scores are NaN
        (``mt.decode.greedy``); beam search and sampling score anyway. Languages as in ``translate``.
        ``encoder_rows`` (``mt.decode.align.EncoderRows``) keeps the encoder outputs for ``align``.
        """
        targets = line_targets(target_lang, len(lines))
        sources = self.encode_lines(lines, targets, source_lang)
        return self.decode_sources(sources, progress, on_batch, scores, self.forced_first(targets), encoder_rows)

    def for_source(self, source_lang: str) -> Translator:
        """This translator reading ``source_lang`` by default (a model with language codes puts its code first)."""
        return Translator(self.model, self.tokenizers, self.cfg, self.device, max_positions=self.max_positions,
                          max_src_len=self.max_src_len, processes=self.processes, source_lang=source_lang)

    def with_config(self, cfg: DecodeConfig) -> Translator:
        """This translator (the same model, tokenizers, limits and languages) with other search settings."""
        return Translator(self.model, self.tokenizers, cfg, self.device, max_positions=self.max_positions,
                          max_src_len=self.max_src_len, processes=self.processes, source_lang=self.source_lang)

    def decode_sources(
        self, sources: list[list[int]], progress: bool = False, on_batch: BatchDone | None = None,
        scores: bool = True, forced: Sequence[int | None] | None = None, encoder_rows: EncoderRows | None = None,
    ) -> list[Translation]:
        """``translate_nbest`` of sources already encoded (``encode_lines``; [] for an empty line), ``forced``
        the first target token of each (``forced_first``) or None; with ``processes``, their sentences are
        shared out among the decoding processes."""
        results = [Translation([], [], 0) for _ in sources]
        todo = [i for i, ids in enumerate(sources) if ids]
        empty = [(i, results[i]) for i, ids in enumerate(sources) if not ids]
        if on_batch is not None and empty:
            on_batch(empty)
        if self.processes is not None:
            self._decode_in_processes(sources, todo, results, progress, on_batch, scores, forced)
            return results
        generator = torch.Generator(device=self.device).manual_seed(self.cfg.seed)
        was_training = self.model.training
        self.model.eval()  # no dropout; restored below, so validation inside training is safe
        try:
            recording = encoder_rows.recording(self.model) if encoder_rows is not None else contextlib.nullcontext()
            with torch.inference_mode(), recording, tqdm(
                total=len(todo), unit="sent", disable=not progress, file=sys.stderr
            ) as bar:
                for pool in self._pools(self._batches(todo, sources)):
                    self._translate_pool(sources, pool, generator, results, on_batch, bar.update, scores, forced)
        finally:
            self.model.train(was_training)
        return results

    def _decode_in_processes(
        self, sources: list[list[int]], todo: list[int], results: list[Translation], progress: bool,
        on_batch: BatchDone | None, scores: bool, forced: Sequence[int | None] | None,
    ) -> None:
        """Decode the sentences ``todo`` in ``self.processes`` into ``results`` (``decode_sources``)."""
        with tqdm(total=len(todo), unit="sent", disable=not progress, file=sys.stderr) as bar:

            def finish(found: list[tuple[int, Translation]]) -> None:
                done = [(todo[k], translation) for k, translation in found]
                for i, translation in done:
                    results[i] = translation
                if on_batch is not None:
                    on_batch(done)
                bar.update(len(done))

            share = [forced[i] for i in todo] if forced is not None else None
            self.processes.decode(self.cfg, [sources[i] for i in todo], finish, scores, share)

    def _pools(self, batches: list[list[int]]) -> list[list[list[int]]]:
        """Batches decoded in one search call: where ``cfg.refill`` names the strategy (``greedy``, or
        ``all`` for beam and greedy) up to ``POOL_BATCHES`` consecutive ones, whose sentences join as
        others finish (``mt.decode.refill``); else one each."""
        refill = (self.cfg.refill == "all" and self.cfg.strategy != "sample") or self.cfg.refill == self.cfg.strategy
        size = POOL_BATCHES if refill else 1
        return [batches[i : i + size] for i in range(0, len(batches), size)]

    def _translate_pool(
        self, sources: list[list[int]], pool: list[list[int]], generator: torch.Generator,
        results: list[Translation], on_batch: BatchDone | None, progress: Callable[[int], object],
        scores: bool, forced: Sequence[int | None] | None = None,
    ) -> None:
        """Decode the batches of ``pool`` (line indices) in one search call into ``results``: a pool of
        several refills (``mt.decode.refill``; each sentence's batch size bounds the sentences live beside
        it) and reports lines as they end; a pool of one is decoded whole and reported at its end.

        A pool is decoded longest first: the long sentences start at once and the short ones fill the
        places around them, so the last steps decode a few short sentences, not the longest ones alone."""
        if len(pool) > 1:
            pool = [batch[::-1] for batch in reversed(pool)]  # (batches come sorted by length, shortest first)
        lines = [i for batch in pool for i in batch]
        batch_sources = [sources[i] for i in lines]

        def finish(found: list[tuple[int, list[Hypothesis]]]) -> None:
            done = [(lines[k], self._translation(batch_sources[k], hyps)) for k, hyps in found]
            for i, translation in done:
                results[i] = translation
            if on_batch is not None:
                on_batch(done)
            progress(len(done))

        live = [len(batch) for batch in pool for _ in batch] if len(pool) > 1 else None
        src, src_pad_mask = collate_sources(batch_sources, self.device)  # (B, S) each
        nbests = search(
            self.model, src, src_pad_mask, self.cfg, max_positions=self.max_positions,
            vocab_size=self.tokenizers.tgt.vocab_size, generator=generator, live=live,
            on_done=finish if live is not None else None, scores=scores,
            forced=[forced[i] for i in lines] if forced is not None else None,
        )
        if live is None:
            finish(list(enumerate(nbests)))

    def _translation(self, source: list[int], hyps: list[Hypothesis]) -> Translation:
        return Translation(hyps, [self.tokenizers.tgt.decode(h.tokens) for h in hyps], len(source))

    def align(self, lines: Sequence[str], translations: Sequence[Translation], target_lang: Targets = None,
              layer: int = ALIGN_LAYER, shift: bool = SHIFT, source_lang: str | None = None,
              encoder_rows: EncoderRows | None = None) -> list[list[Link]]:
        """Word links (source word, target word) of each line with its best translation, from the model's
        cross-attention (``mt.decode.align``: ``layer``, ``shift``); [] for an empty line or translation.
        ``encoder_rows``: the encoder outputs kept while decoding (``translate_nbest``), else encoded here."""
        if self.model is None:
            raise UserError("word alignment needs the model in this process (run with one worker)")
        targets = line_targets(target_lang, len(lines))
        languages = {lang: self.language_ids(lang, source_lang) for lang in set(targets)}
        pairs = []
        for line, translation, lang in zip(lines, translations, targets, strict=True):
            (tag, first), (ids, spans) = languages[lang], self.tokenizers.src.encode_with_spans(line)
            src_ids = (tag + ids)[: self.max_src_len] if line.strip() else []
            src_words = ([-1] * len(tag) + piece_words(line, spans))[: len(src_ids)]
            tgt_ids = translation.hypotheses[0].tokens if translation.hypotheses else []
            text, tgt_spans = self.tokenizers.tgt.decode_with_spans(tgt_ids)
            tgt_words = piece_words(text, tgt_spans)
            if first is not None and tgt_ids:  # the forced code, read first as when it was generated: no word
                tgt_ids, tgt_words = [first, *tgt_ids], [-1, *tgt_words]
            pairs.append(AlignInput(src_ids, src_words, list(tgt_ids), tgt_words, len(tag)))
        return align_batch(self.model, pairs, self.device, layer, shift, encoder_rows)

    def language_ids(self, target_lang: str | None, source_lang: str | None = None) -> tuple[list[int], int | None]:
        """What asks for ``target_lang``: the ids put before a source, and the target's forced first token.

        A multilingual mt model (or Marian's) reads a tag, ``([id of >>fr<<], None)``, and nothing for None; a
        model with language codes (M2M-100, NLLB) reads the source language's code (``source_lang``, else the
        translator's) and writes the target's first: ``([id of __en__], id of __fr__)`` (None: not forced).
        """
        if not self._codes:
            return self._tag(target_lang), None
        source = source_lang or self.source_lang
        if source is None:
            raise LanguageError(f"this model reads the source language's code first: give the source language "
                                f"(--source-lang; {self._known()})")
        return [self._code(source, "source")], None if target_lang is None else self._code(target_lang, "target")

    def target_tag(self, target_lang: str | None, source_lang: str | None = None) -> list[int]:
        """The ids put before a source for ``target_lang`` (``language_ids``): ``[id of >>lang<<]`` for a
        multilingual model's target language (``[]`` for None), the source language's code for a model with codes."""
        return self.language_ids(target_lang, source_lang)[0]

    def forced_first(self, targets: Sequence[str | None]) -> list[int | None] | None:
        """The forced first target token of lines into ``targets`` (one each, ``line_targets``; ``language_ids``),
        or None when no line has one (a model without language codes, or no target asked for)."""
        if not self._codes:
            return None
        firsts = {lang: None if lang is None else self._code(lang, "target") for lang in set(targets)}
        forced = [firsts[lang] for lang in targets]
        return forced if any(first is not None for first in forced) else None

    def _tag(self, target_lang: str | None) -> list[int]:
        """``[id of >>lang<<]`` for a multilingual model's target language, ``[]`` for None."""
        if target_lang is None:
            return []
        tag = self.tokenizers.src.piece_id(lang_tag(target_lang))
        if tag is None:
            raise LanguageError(f"this model has no target-language tag {lang_tag(target_lang)}")
        return [tag]

    def _code(self, lang: str, side: str) -> int:
        """The id of ``lang``'s code (a model with language codes); LanguageError naming the model's."""
        if lang not in self._codes:
            raise LanguageError(f"this model has no code for the {side} language {lang!r} ({self._known()})")
        return self._codes[lang]

    def _known(self) -> str:
        names = list(self._codes)
        return f"it has {', '.join(names[:8])}" + (f" and {len(names) - 8} more" if len(names) > 8 else "")

    def encode_lines(self, lines: Sequence[str], target_lang: Targets = None,
                     source_lang: str | None = None) -> list[list[int]]:
        """Source pieces per line ([] for an empty line), too-long ones truncated or rejected.

        With ``target_lang`` each non-empty line starts with its language's tag (counted in the length); with
        a model with language codes, with the source language's code (``language_ids``).
        """
        targets = line_targets(target_lang, len(lines))
        tags = {lang: self.target_tag(lang, source_lang) for lang in set(targets)}
        sources = []
        for number, (line, lang) in enumerate(zip(lines, targets, strict=True), start=1):
            ids = tags[lang] + self.tokenizers.src.encode(line) if line.strip() else []
            limit = self.max_src_len
            if limit is not None and len(ids) > limit:
                what = f"line {number}: {len(ids)} source pieces, more than the model's {limit}"
                if self.cfg.on_too_long == "reject":
                    raise UserError(f"{what} (on_too_long=reject)")
                warnings.warn(f"{what}; truncated to {limit}", stacklevel=2)
                ids = ids[:limit]
            sources.append(ids)
        return sources

    def _batches(self, todo: list[int], sources: list[list[int]]) -> list[list[int]]:
        """``todo`` (line indices) sorted by source length and cut under the token/sentence budget.

        A sentence that alone exceeds ``cfg.max_tokens`` is decoded in a batch of its own.
        """
        budget, rows = self.cfg.max_tokens, rows_per_sentence(self.cfg)
        cost = {i: (len(sources[i]) + 1) * rows for i in todo}  # EOS included, x beam
        fits = [i for i in todo if cost[i] <= budget]
        batches = batch_by_tokens([cost[i] for i in fits], budget, self.cfg.max_sentences)
        return [[fits[j] for j in batch] for batch in batches] + [[i] for i in todo if cost[i] > budget]
