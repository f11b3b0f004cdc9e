"""Sentences of a unit's text, as character spans: everything between them is kept as it was.

``split_sentences`` finds each sentence with sentencex (rule-based, about 300 languages; a language it has
no rules for falls back along sentencex's own chain of related languages to its default rules, which end a
sentence at ``.``, ``!``, ``?`` and their kin followed by space). The spans never cover the whitespace
around a sentence, so a text is rebuilt exactly from its separators (spaces, line breaks, blank lines)
and the translated sentences. With ``hard_breaks`` (plain text) a line break always ends a sentence, so a
text of one sentence a line is cut exactly where it was before sentences were split.

``fit_sentences`` cuts a sentence longer than the model's source limit into pieces that fit: at clause
marks (``,``, ``;``, ``:``, dashes, brackets) when it can, else between words, else between characters,
each cut as near the middle of what is left as it can be, so no text is ever dropped or truncated.
"""

from __future__ import annotations

import re
from collections.abc import Callable

import sentencex

Span = tuple[int, int]  # [start, end) character offsets

LINE = re.compile(r"[^\n]+")
CLAUSE_CUT = re.compile(r"(?<=[,;:)\]–—])\s+|\s+(?=[(\[–—])")  # whitespace after a clause mark, or before one
WORD_CUT = re.compile(r"\s+")


def split_sentences(text: str, language: str, hard_breaks: bool = True) -> list[Span]:
    """The sentences of ``text`` in order, each without surrounding whitespace (empty text: none)."""
    chunks = [m.span() for m in LINE.finditer(text)] if hard_breaks else [(0, len(text))]
    spans: list[Span] = []
    for start, end in chunks:
        spans.extend((start + s, start + e) for s, e in _sentencex_spans(text[start:end], language))
    return spans


def _sentencex_spans(text: str, language: str) -> list[Span]:
    """sentencex's sentences of ``text``, located in it and stripped of whitespace."""
    spans, at = [], 0
    for found in sentencex.get_sentence_boundaries(language, text):
        piece = found["text"]
        start = found["start_index"]
        if text[start : start + len(piece)] != piece:  # offsets of another unit than str indices: find it
            start = text.find(piece, at)
            if start < 0:
                continue  # sentencex changed the text; the span search below recovers what it skipped
        end = start + len(piece)
        stripped = piece.strip()
        if stripped:
            lead = len(piece) - len(piece.lstrip())
            spans.append((start + lead, start + lead + len(stripped)))
        at = end
    return _cover(text, spans)


def _cover(text: str, spans: list[Span]) -> list[Span]:
    """``spans`` plus a span for any non-whitespace text they missed: nothing is ever left untranslated."""
    out, at = [], 0
    for start, end in sorted(spans):
        start = max(start, at)
        if start >= end:
            continue
        gap = text[at:start]
        if gap.strip():
            lead = len(gap) - len(gap.lstrip())
            out.append((at + lead, at + lead + len(gap.strip())))
        out.append((start, end))
        at = end
    tail = text[at:]
    if tail.strip():
        lead = len(tail) - len(tail.lstrip())
        out.append((at + lead, at + lead + len(tail.strip())))
    return out


def fit_sentences(text: str, spans: list[Span], count: Callable[[str], int], limit: int | None) -> list[Span]:
    """``spans`` with every sentence of more than ``limit`` pieces (``count``) cut into pieces that fit."""
    if limit is None:
        return list(spans)
    out: list[Span] = []
    for span in spans:
        out.extend(_fit(text, span, count, limit))
    return out


def _fit(text: str, span: Span, count: Callable[[str], int], limit: int) -> list[Span]:
    start, end = span
    if end - start <= 1 or count(text[start:end]) <= limit:
        return [span]
    left, right = _cut(text, start, end)
    return _fit(text, left, count, limit) + _fit(text, right, count, limit)


def _cut(text: str, start: int, end: int) -> tuple[Span, Span]:
    """``[start, end)`` in two, at the clause mark (else the space, else the character) nearest its middle."""
    piece = text[start:end]
    middle = len(piece) / 2
    for pattern in (CLAUSE_CUT, WORD_CUT):
        cuts = [m.span() for m in pattern.finditer(piece) if 0 < m.start() and m.end() < len(piece)]
        if cuts:
            a, b = min(cuts, key=lambda c: abs((c[0] + c[1]) / 2 - middle))
            return (start, start + a), (start + b, end)
    half = start + len(piece) // 2
    return (start, half), (half, end)
