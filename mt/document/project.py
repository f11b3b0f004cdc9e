"""Inline elements carried from a source text onto its translation through a word alignment.

Detag-and-project (Müller 2017; Hanneman & Dinu 2020): the sentence is translated without its markup, and
each inline element is put around the target words aligned to the source words it covered. Words are runs
of non-whitespace (``WORD``, the words the aligner's links count: ``mt.decode.align``). Per element:

- within one sentence: the target words aligned to its source words, from the first to the last of them;
  when none is aligned, the words at the same relative place in the target sentence;
- over several sentences: each sentence it covers whole maps to that whole target sentence, the ones it
  covers in part as above, and the element spans them all;
- of zero width (an image, a break, protected code): after the target word aligned to the source word
  before it, or where the same place falls in the translation.

The projected spans are then made to nest as the source's did: a child is kept inside its parent's span,
siblings are ordered by where they landed (a translation may reorder them) and never overlap.
"""

from __future__ import annotations

import re
import unicodedata
from collections.abc import Sequence
from dataclasses import dataclass

from mt.document.model import Inline

WORD = re.compile(r"\S+")
Link = tuple[int, int]  # (source word, target word), both counted from 0 in their sentence
Span = tuple[int, int]


@dataclass(frozen=True)
class Placed:
    """One sentence of a unit: its source span, its translation's span in the target text, the alignment."""

    source: Span
    target: Span
    links: Sequence[Link] | None  # None: not aligned (no element touches the sentence)
    source_words: list[Span]  # word spans in the unit's source text
    target_words: list[Span]  # word spans in the unit's target text


def word_spans(text: str, offset: int = 0) -> list[Span]:
    """Each word's span without the punctuation around it ("home." -> "home"), so an element put around a
    word does not take in the full stop after it (a word of punctuation alone keeps it all)."""
    spans = []
    for m in WORD.finditer(text):
        start, end = m.span()
        while start < end - 1 and _is_punctuation(text[start]):
            start += 1
        while end > start + 1 and _is_punctuation(text[end - 1]):
            end -= 1
        spans.append((start + offset, end + offset))
    return spans


def _is_punctuation(char: str) -> bool:
    return unicodedata.category(char).startswith("P")


def place(source_text: str, target_text: str, source: Span, target: Span, links: Sequence[Link] | None) -> Placed:
    return Placed(source, target, links, word_spans(source_text[source[0] : source[1]], source[0]),
                  word_spans(target_text[target[0] : target[1]], target[0]))


def project_inlines(inlines: Sequence[Inline], sentences: Sequence[Placed], source_len: int,
                    target_len: int) -> list[Inline]:
    """``inlines`` of the source text as inlines of the target text (same keys and parents), nested validly;
    parents still come first, siblings in their new order (parent indices follow the new order)."""
    spans = [_project(inline, sentences, source_len, target_len) for inline in inlines]
    fitted: list[Span] = [(0, 0)] * len(inlines)
    order: list[int] = []

    def visit(parent: int | None, bounds: Span) -> None:
        kids = [i for i, inline in enumerate(inlines) if inline.parent == parent]
        clipped = {i: _clip(spans[i], bounds) for i in kids}
        kids.sort(key=lambda i: clipped[i])  # by start, then the shorter (a zero-width one) first; stable
        at = bounds[0]
        for i in kids:
            start, end = clipped[i]
            start = max(start, at)
            end = max(end, start)
            fitted[i] = (start, end)
            at = end
            order.append(i)
            visit(i, fitted[i])

    visit(None, (0, target_len))
    new_index = {old: new for new, old in enumerate(order)}
    return [
        Inline(*fitted[i], inlines[i].key, None if inlines[i].parent is None else new_index[inlines[i].parent])
        for i in order
    ]


def _clip(span: Span, bounds: Span) -> Span:
    start = min(max(span[0], bounds[0]), bounds[1])
    end = min(max(span[1], start), bounds[1])
    return start, end


def _project(inline: Inline, sentences: Sequence[Placed], source_len: int, target_len: int) -> Span:
    if inline.start == inline.end:
        point = _project_point(inline.start, sentences, source_len, target_len)
        return point, point
    found: list[Span] = []
    for s in sentences:
        lo, hi = max(inline.start, s.source[0]), min(inline.end, s.source[1])
        if lo >= hi:
            continue
        if lo == s.source[0] and hi == s.source[1]:
            found.append(s.target)
        else:
            found.append(_project_part(s, lo, hi))
    # an end in a separator (or an element with no sentence in it) keeps its place in the separator
    if not found or not any(s.source[0] <= inline.start < s.source[1] for s in sentences):
        p = _project_point(inline.start, sentences, source_len, target_len)
        found.append((p, p))
    if not any(s.source[0] < inline.end <= s.source[1] for s in sentences):
        p = _project_point(inline.end, sentences, source_len, target_len)
        found.append((p, p))
    return min(a for a, _ in found), max(b for _, b in found)


def _project_part(s: Placed, lo: int, hi: int) -> Span:
    """The target span of the source characters ``[lo, hi)`` inside sentence ``s``."""
    covered = {w for w, (a, b) in enumerate(s.source_words) if a < hi and b > lo}
    aligned = sorted({t for w, t in (s.links or ()) if w in covered and t < len(s.target_words)})
    if aligned:
        return s.target_words[aligned[0]][0], s.target_words[aligned[-1]][1]
    return _proportional(s, lo), _proportional(s, hi)


def _project_point(p: int, sentences: Sequence[Placed], source_len: int, target_len: int) -> int:
    """Where the source position ``p`` (between characters) falls in the target text."""
    prev_source, prev_target = 0, 0
    for s in sentences:
        if p <= s.source[0]:  # in the separator before this sentence: the same offset from its start
            return min(prev_target + (p - prev_source), s.target[0])
        if p < s.source[1]:
            return _point_in_sentence(s, p)
        prev_source, prev_target = s.source[1], s.target[1]
    return min(prev_target + (p - prev_source), target_len)


def _point_in_sentence(s: Placed, p: int) -> int:
    before = [w for w, (_, b) in enumerate(s.source_words) if b <= p]
    if not before:
        return s.target[0]
    aligned = [t for w, t in (s.links or ()) if w == before[-1] and t < len(s.target_words)]
    if aligned:
        return s.target_words[max(aligned)][1]
    return _proportional(s, p)


def _proportional(s: Placed, p: int) -> int:
    """The target position at the same relative place as ``p`` in its sentence, moved to a word boundary."""
    length = s.source[1] - s.source[0]
    share = (p - s.source[0]) / length if length else 0.0
    q = s.target[0] + round(share * (s.target[1] - s.target[0]))
    bounds = [s.target[0], s.target[1], *(a for a, _ in s.target_words), *(b for _, b in s.target_words)]
    return min(bounds, key=lambda b: abs(b - q))
