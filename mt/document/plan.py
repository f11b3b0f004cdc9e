"""From units to the sentences a model translates, and back: the one path every format and entry point takes.

``plan_units`` cuts each unit's text into sentences (``mt.document.segment``: split, then long ones cut to
the model's limit) and lists them in order; the caller translates ``Plan.sentences`` however it batches
them (mt-translate's Translator, mt-serve's worker, together with other requests' sentences), with a word
alignment for the sentences an inline element touches (``Plan.needs_alignment``). ``Plan.assemble`` puts
the translations back: each unit's separators exactly as they were between its translated sentences, and
its inline elements projected onto the translation (``mt.document.project``). Every sentence of the
source has exactly one translation in the result: nothing is dropped.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

from mt.document.model import Unit
from mt.document.project import Link, place, project_inlines
from mt.document.segment import LINE, Span, fit_sentences, split_sentences


@dataclass(frozen=True)
class Translated:
    """A sentence's translation and, where asked for, its word alignment to the source sentence."""

    text: str
    links: Sequence[Link] | None = None


@dataclass(frozen=True)
class Plan:
    """The sentences of some units (see the module docstring)."""

    units: list[Unit]
    spans: list[list[Span]]  # per unit, its sentences' character spans

    @property
    def sentences(self) -> list[str]:
        return [unit.text[a:b] for unit, spans in zip(self.units, self.spans, strict=True) for a, b in spans]

    @property
    def needs_alignment(self) -> list[bool]:
        """Per sentence: whether an inline element starts, ends or sits inside it (and so needs its words
        aligned); a sentence that an element covers whole, or that none touches, needs no alignment."""
        out = []
        for unit, spans in zip(self.units, self.spans, strict=True):
            for a, b in spans:
                out.append(any(
                    a < inline.start < b or a < inline.end < b
                    for inline in unit.inlines
                ))
        return out

    def assemble(self, translations: Sequence[Translated]) -> list[Unit]:
        """The translated units: one translation per sentence of ``sentences``, in order."""
        if len(translations) != sum(map(len, self.spans)):
            raise ValueError(f"{len(translations)} translations for {sum(map(len, self.spans))} sentences")
        out, at = [], 0
        for unit, spans in zip(self.units, self.spans, strict=True):
            out.append(assemble_unit(unit, spans, translations[at : at + len(spans)]))
            at += len(spans)
        return out


def plan_units(units: Sequence[Unit], language: str, hard_breaks: bool,
               count: Callable[[str], int] | None = None, limit: int | None = None, split: bool = True) -> Plan:
    """The sentences of ``units`` in ``language``; with ``count`` (pieces of a text, as the model reads it)
    and ``limit`` (the model's source limit), a longer sentence is cut into pieces that fit.

    ``split=False`` sends each unit (each line, with ``hard_breaks``) to the model whole, as one sentence:
    what mt did before it split sentences (the model's limit then truncates or rejects a long one)."""
    spans = []
    for unit in units:
        if not split:
            spans.append(whole_lines(unit.text, hard_breaks))
            continue
        found = split_sentences(unit.text, language, hard_breaks)
        spans.append(fit_sentences(unit.text, found, count, limit) if count is not None else found)
    return Plan(list(units), spans)


def whole_lines(text: str, hard_breaks: bool) -> list[Span]:
    """Each line (``hard_breaks``) or the whole text, without its surrounding whitespace, as one span."""
    chunks = [(m.start(), m.end()) for m in LINE.finditer(text)] if hard_breaks else [(0, len(text))]
    out = []
    for start, end in chunks:
        piece = text[start:end]
        if piece.strip():
            lead = len(piece) - len(piece.lstrip())
            out.append((start + lead, start + lead + len(piece.strip())))
    return out


def assemble_unit(unit: Unit, spans: Sequence[Span], translations: Sequence[Translated]) -> Unit:
    """``unit`` translated: its separators kept, its sentences replaced, its inline elements projected."""
    parts: list[str] = []
    targets: list[Span] = []
    at, length = 0, 0
    for (a, b), translated in zip(spans, translations, strict=True):
        parts.append(unit.text[at:a])
        length += a - at
        parts.append(translated.text)
        targets.append((length, length + len(translated.text)))
        length += len(translated.text)
        at = b
    parts.append(unit.text[at:])
    text = "".join(parts)
    if not unit.inlines:
        return Unit(text)
    placed = [place(unit.text, text, span, target, tr.links)
              for span, target, tr in zip(spans, targets, translations, strict=True)]
    return Unit(text, project_inlines(unit.inlines, placed, len(unit.text), len(text)))

