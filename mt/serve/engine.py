"""What the decoding worker drives: an ``Engine`` (text lines + decoding options -> n-best outputs).

``TorchEngine`` wraps mt's ``Translator``; ``mt.serve.ct2_engine.Ct2Engine`` a CTranslate2 export.
Requests choose a few decoding options (``Options``); the engine resolves them against its defaults
into a ``DecodeConfig`` validated like any config, so a bad value is a 400 naming the option. A model
of several target languages (``tagged``) reads each line's target as a tag before its source: the
engine takes one target per line, so lines for different targets share a batch. A model with language codes
(M2M-100, NLLB) also reads its source language's code first: ``TorchEngine.translate`` takes the lines' source
(one a call: the Translator takes one; the worker batches one source at a time). ``translate`` also tells
``on_done`` of lines as they are finished (each line once), so the worker can answer a request before the
rest of a large gather is decoded. ``TorchEngine.fill`` is the worker's second warm-up (see there).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Protocol

from mt.config import DecodeConfig, validate_group
from mt.decode import Translation, Translator
from mt.decode.align import EncoderRows
from mt.decode.translator import line_targets
from mt.model.packed_linear import padded_rows


@dataclass(frozen=True)
class Options:
    """Decoding options of one request (None: the server's default). Hashable: the batching key."""

    strategy: str | None = None
    beam: int | None = None
    nbest: int | None = None
    alpha: float | None = None


@dataclass
class Output:
    """The n-best of one line, best first (empty lists for an empty line), and its token counts."""

    texts: list[str]
    scores: list[float]
    src_tokens: int  # source pieces fed to the model, EOS excluded
    tgt_tokens: int  # generated pieces of the best hypothesis plus EOS
    links: list[tuple[int, int]] | None = None  # (source word, target word) of the best, where asked for

    @property
    def text(self) -> str:
        return self.texts[0] if self.texts else ""


FILL_LONGEST = 64  # pieces of the longest warm-up source: about the longest line of everyday text
FILL_WORD = "a"  # one piece in any SentencePiece model of a Latin-script language (or a few pieces)
FORCED_LENGTH = 1 << 30  # as min_len: EOS is banned until a sentence's own maximum length

LinesDone = Callable[[list[tuple[int, Output]]], None]  # (line index, its output) of lines just finished


def resolve(base: DecodeConfig, options: Options) -> DecodeConfig:
    """``base`` with the request's options applied and validated; a ConfigError names a bad one."""
    fields = {"strategy": options.strategy, "beam_size": options.beam, "nbest": options.nbest, "alpha": options.alpha}
    cfg = dataclasses.replace(base, **{k: v for k, v in fields.items() if v is not None})
    return validate_group("decode", cfg)


def rows_per_line(cfg: DecodeConfig) -> int:
    """Decoder rows a sentence takes (the beam for beam search): what a source token costs in a batch."""
    return cfg.beam_size if cfg.strategy == "beam" else 1


class Engine(Protocol):
    """A model the worker can decode with; every method but ``translate`` is cheap and thread-safe."""

    source_lang: str
    target_langs: list[str]  # what requests may ask for, in the model's order
    tagged: bool  # several target languages: each line's target is a tag before its source
    description: str  # what is served, for the log and /v1/model

    @property
    def max_src_len(self) -> int | None: ...

    @property
    def on_too_long(self) -> str: ...  # truncate | reject

    def settings(self, options: Options) -> DecodeConfig: ...

    def count_pieces(self, line: str, target: str | None = None) -> int: ...  # the tag included

    def translate(
        self, lines: Sequence[str], options: Options, targets: Sequence[str | None] | None = None,
        on_done: LinesDone | None = None, align: Sequence[bool] | None = None,
    ) -> list[Output]: ...  # ``targets``: each line's tag language (None: no tag); ``on_done``: see the module doc;
    # ``align``: the lines whose best translation also gets its word links (``Output.links``); an engine of a model
    # with language codes also takes ``source=``, the code of the lines' source language (``TorchEngine``)


class TorchEngine:
    """An mt checkpoint through ``Translator`` (the same code path, and so the same output, as mt-translate)."""

    def __init__(
        self, translator: Translator, source_lang: str, target_langs: Sequence[str], description: str,
        *, tagged: bool = False,
    ) -> None:
        self.translator = translator
        self.source_lang, self.target_langs, self.description = source_lang, list(target_langs), description
        self.tagged = tagged

    @property
    def max_src_len(self) -> int | None:
        return self.translator.max_src_len

    @property
    def parameters(self) -> int | None:
        """The model's parameter count (None for decoding processes that hold it elsewhere)."""
        model = self.translator.model
        return None if model is None else sum(p.numel() for p in model.parameters())

    @property
    def on_too_long(self) -> str:
        return self.translator.cfg.on_too_long

    def settings(self, options: Options) -> DecodeConfig:
        return resolve(self.translator.cfg, options)

    def count_pieces(self, line: str, target: str | None = None) -> int:
        if not line.strip():
            return 0
        return len(self.translator.target_tag(target)) + len(self.translator.tokenizers.src.encode(line))

    def translate(
        self, lines: Sequence[str], options: Options, targets: Sequence[str | None] | None = None,
        on_done: LinesDone | None = None, align: Sequence[bool] | None = None, source: str | None = None,
    ) -> list[Output]:
        """The outputs of ``lines``; the Translator sorts them by length and decodes them in batches of
        similar lengths, and ``on_done`` hears of each batch as it ends, its ``align`` lines aligned. ``source``:
        the lines' source language, a model with language codes' own code (None: the Translator's default)."""
        translator = self._translator(self.settings(options))
        per_line = line_targets(targets, len(lines))
        outputs: list[Output | None] = [None] * len(lines)
        rows = EncoderRows() if align is not None and any(align) and translator.model is not None else None

        def batch_done(done: list[tuple[int, Translation]]) -> None:
            aligned = [(i, tr) for i, tr in done if align is not None and align[i]]
            links = translator.align([lines[i] for i, _ in aligned], [tr for _, tr in aligned],
                                     [per_line[i] for i, _ in aligned], source_lang=source,
                                     encoder_rows=rows) if aligned else []
            link_of = {i: found for (i, _), found in zip(aligned, links, strict=True)}
            finished = [(i, as_output(tr, link_of.get(i))) for i, tr in done]
            for i, output in finished:
                outputs[i] = output
            if on_done is not None:
                on_done(finished)

        translator.translate_nbest(lines, target_lang=targets, on_batch=batch_done, source_lang=source,
                                   encoder_rows=rows)
        return [output for output in outputs if output is not None]

    def fill(self, max_batch_tokens: int, target: str | None = None) -> int:
        """Decode the largest batch the settings allow, every output at its length limit; returns its lines.

        The worker's second warm-up: sources of 1, 2, ... words (``fill_lines``) up to one decoder batch
        (``max_batch_tokens`` and the decoder's own ``max_tokens``, ``max_sentences``), with EOS banned until
        each sentence's maximum length, so the batch runs as long as the limits allow and shrinks a sentence
        a step through the row counts traffic meets; then one short decode at each row count of the source
        side (``_fill_source_rows``), and the long batch again. The memory traffic would build (kernels, one
        per product shape, and the heap's high-water mark) is then there before the first request, and a
        machine too small for the model fails at start, not on a request (a soak's RSS: docs/benchmarks.md).
        """
        t = self.translator
        # min_len is capped by each sentence's max_len; a line over the source limit is cut, never refused
        cfg = dataclasses.replace(t.cfg, nbest=1, min_len=FORCED_LENGTH, on_too_long="truncate")
        budget = min(max_batch_tokens, cfg.max_tokens)
        per_word = max(1, self.count_pieces(FILL_WORD))
        tag = self.count_pieces(FILL_WORD, target) - per_word  # a target tag's pieces (0 for one target)
        room = None if t.max_src_len is None else t.max_src_len - tag
        lines = fill_lines(budget, rows_per_line(cfg), room, per_word)[: cfg.max_sentences]
        long_batch = self._translator(cfg)
        long_batch.translate_nbest(lines, target_lang=target)
        self._fill_source_rows(budget, tag, per_word, room, target)
        # again: the kernels just built now sit among the blocks the long batch freed, so its large blocks
        # (caches, logits) would otherwise be placed anew by the first requests, tens of MiB above the start
        long_batch.translate_nbest(lines, target_lang=target)
        return len(lines)

    def _fill_source_rows(self, budget: int, tag: int, per_word: int, room: int | None, target: str | None) -> None:
        """The third warm-up: one short decode per row count the source side's products run at.

        A batch of B sources of S pieces runs the encoder's (and the cross-attention's key/value) products
        at B x S rows, padded to ``padded_rows``; the long batch above meets only its own. Here each padded
        size up to a decoder batch's source tokens gets a batch of equal lines of that many rows, decoded
        for one step: their kernels are built before the first request, not in the first minutes of traffic.
        """
        cfg = dataclasses.replace(self.translator.cfg, nbest=1, max_len_a=0.0, max_len_b=1, min_len=1)
        max_rows = budget // rows_per_line(cfg)
        longest = max(1, min(FILL_LONGEST, room or FILL_LONGEST) // per_word)
        lengths = {tag + words * per_word + 1: words for words in range(1, longest + 1)}  # pieces + EOS -> words
        translator = self._translator(cfg)
        for sentences, length in source_row_batches(max_rows, cfg.max_sentences, list(lengths)):
            line = " ".join([FILL_WORD] * lengths[length])
            translator.translate_nbest([line] * sentences, target_lang=target)

    def _translator(self, cfg: DecodeConfig) -> Translator:
        """The served model and tokenizers with the search settings ``cfg``."""
        t = self.translator
        return Translator(t.model, t.tokenizers, cfg, t.device, max_positions=t.max_positions,
                          max_src_len=t.max_src_len, source_lang=t.source_lang)


def fill_lines(max_batch_tokens: int, rows: int, max_src_len: int | None, pieces_per_word: int = 1) -> list[str]:
    """Warm-up lines of 1, 2, ... words (then again from 1), each at most ``FILL_LONGEST`` and ``max_src_len``
    pieces, whose cost, (pieces + EOS) x ``rows``, fits ``max_batch_tokens`` (at least one line)."""
    longest = max(1, min(FILL_LONGEST, max_src_len or FILL_LONGEST) // pieces_per_word)
    lines, cost = [], 0
    while True:
        words = len(lines) % longest + 1
        cost += (words * pieces_per_word + 1) * rows
        if lines and cost > max_batch_tokens:
            return lines
        lines.append(" ".join([FILL_WORD] * words))


def source_row_batches(max_rows: int, max_sentences: int, lengths: Sequence[int]) -> list[tuple[int, int]]:
    """(sentences, source length) pairs, one for each size ``padded_rows`` gives up to ``max_rows`` rows: B
    sources of S pieces make B x S rows within that size and above the size below it. ``lengths``: the
    source lengths (EOS included) there are lines for; a size no pair reaches is left out."""
    pairs, below = [], 0
    longest_first = sorted(lengths, reverse=True)  # the longest lines: the fewest sentences
    for size in sorted({padded_rows(rows) for rows in range(1, max_rows + 1)}):
        for length in longest_first:
            sentences = min(max_sentences, min(size, max_rows) // length)
            if sentences >= 1 and sentences * length > below:
                pairs.append((sentences, length))
                break
        below = size
    return pairs


def as_output(translation: Translation, links: list[tuple[int, int]] | None = None) -> Output:
    """The engine's view of a Translator result (with the best hypothesis' word links, if any)."""
    tr = translation
    return Output(tr.texts, [h.score for h in tr.hypotheses], tr.src_tokens, tr.tgt_tokens, links)
