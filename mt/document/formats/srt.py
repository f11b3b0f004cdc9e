"""SubRip subtitles (``.srt``): each cue's text is one unit, its tags inline elements.

A cue's lines are joined with one space: a subtitle's sentence often runs over both lines, and the model
should see it whole. Tags in a cue (``<i>``, ``<b>``, ``<u>``, ``<font color=...>``) become inlines when they
open and close in order within the cue; any other tag (one left open, a stray close, ``{\\an8}``) is a
zero-width inline written back as it was. Tags are matched with a regular expression, not an HTML parser,
so a cue's text is never changed (entities stay as written).

The writer keeps every cue's index, timing and the rest of its timing line, and wraps the translation
into as many lines as the cue had: each break goes to the space nearest the point at the same fraction of
the text as the source's break (a translation with too few spaces gets fewer lines).
"""

from __future__ import annotations

import re
from dataclasses import dataclass

import srt

from mt.document.errors import DocumentError
from mt.document.formats import Format
from mt.document.formats.text import decode_utf8
from mt.document.model import Element, Unit, flatten, nest

# an HTML-like tag, or an override in braces (``{\an8}``, ``{\i1}``)
TAG = re.compile(r"<(/?)([A-Za-z][A-Za-z0-9]*)\b[^<>]*>|\{\\[^{}]*\}")


@dataclass(frozen=True)
class _Tag:
    """A kept tag: a pair (``close`` the closing tag) or, with ``close`` None, one written back where it stood."""

    open: str
    close: str | None = None


@dataclass
class _Cue:
    """What a cue keeps besides its unit: the subtitle, and where its line breaks fell (fractions of its text)."""

    subtitle: srt.Subtitle
    breaks: list[float]


def _tokens(content: str) -> list[tuple[int, int, re.Match[str] | None]]:
    """``content`` as (start, end, tag match or None for text) pieces, in order."""
    pieces: list[tuple[int, int, re.Match[str] | None]] = []
    at = 0
    for match in TAG.finditer(content):
        if match.start() > at:
            pieces.append((at, match.start(), None))
        pieces.append((match.start(), match.end(), match))
        at = match.end()
    if at < len(content):
        pieces.append((at, len(content), None))
    return pieces


def _pairs(pieces: list[tuple[int, int, re.Match[str] | None]]) -> dict[int, int]:
    """Opening piece index -> closing piece index for the tags that open and close in order."""
    pairs: dict[int, int] = {}
    open_tags: list[tuple[int, str]] = []
    for i, (_, _, match) in enumerate(pieces):
        if match is None or match.group(2) is None:
            continue
        tag = match.group(2).lower()
        if not match.group(1):
            open_tags.append((i, tag))
            continue
        for depth in range(len(open_tags) - 1, -1, -1):
            if open_tags[depth][1] == tag:
                pairs[open_tags[depth][0]] = i
                del open_tags[depth:]  # the ones opened inside and left open stay unpaired
                break
    return pairs


def _parse_cue(content: str, tags: list[_Tag]) -> tuple[Unit, list[float]]:
    """A cue's unit (tags appended to ``tags``, their keys) and the fractions of its text where its lines broke."""
    joined = content.replace("\n", " ")
    newlines = [i for i, char in enumerate(content) if char == "\n"]
    pieces = _tokens(joined)
    pairs = _pairs(pieces)
    closing = set(pairs.values())
    root: list[str | Element] = []
    stack = [root]
    plain = 0
    break_offsets: list[int] = []
    for i, (start, end, match) in enumerate(pieces):
        if match is None:
            break_offsets += [plain + n - start for n in newlines if start <= n < end]
            stack[-1].append(joined[start:end])
            plain += end - start
        elif i in pairs:
            tags.append(_Tag(match.group(0), joined[pieces[pairs[i]][0] : pieces[pairs[i]][1]]))
            element = Element(len(tags) - 1, [])
            stack[-1].append(element)
            stack.append(element.children)
        elif i in closing:
            stack.pop()
        else:
            tags.append(_Tag(match.group(0)))
            stack[-1].append(Element(len(tags) - 1, []))
    unit = flatten(root)
    return unit, [offset / len(unit.text) for offset in break_offsets] if unit.text else []


def _render(nodes: list[str | Element], tags: list[_Tag]) -> list[tuple[str, bool]]:
    """The cue as (piece, is text) pairs: tags as they were read, text with no line breaks of its own."""
    out: list[tuple[str, bool]] = []
    for node in nodes:
        if isinstance(node, str):
            out.append((node.replace("\r", " ").replace("\n", " "), True))
            continue
        tag = tags[node.key]
        out.append((tag.open, False))
        out += _render(node.children, tags)
        if tag.close is not None:
            out.append((tag.close, False))
    return out


def _wrap(pieces: list[tuple[str, bool]], breaks: list[float]) -> str:
    """The pieces joined, with the spaces nearest ``breaks`` (fractions of the text) made line breaks."""
    spaces: list[int] = []  # text offsets of the spaces a line may break at
    length = 0
    for piece, is_text in pieces:
        if is_text:
            spaces += [length + i for i, char in enumerate(piece) if char == " "]
            length += len(piece)
    chosen: set[int] = set()
    after = -1
    for fraction in breaks:
        candidates = [s for s in spaces if s > after]
        if not candidates:
            break
        after = min(candidates, key=lambda s: (abs(s - fraction * length), s))
        chosen.add(after)
    out: list[str] = []
    offset = 0
    for piece, is_text in pieces:
        if not is_text:
            out.append(piece)
            continue
        out.append("".join("\n" if offset + i in chosen else char for i, char in enumerate(piece)))
        offset += len(piece)
    return "".join(out)


@dataclass
class SrtDocument:
    """A subtitle file: one unit per cue."""

    units: list[Unit]
    cues: list[_Cue]
    tags: list[_Tag]
    bom: bool
    eol: str
    hard_breaks: bool = False

    def write(self, translated: list[Unit]) -> bytes:
        if len(translated) != len(self.cues):
            raise ValueError(f"the subtitles have {len(self.cues)} cues, got {len(translated)} translated")
        subtitles = []
        for cue, unit in zip(self.cues, translated, strict=True):
            content = _wrap(_render(nest(unit.text, unit.inlines), self.tags), cue.breaks)
            s = cue.subtitle
            subtitles.append(srt.Subtitle(s.index, s.start, s.end, content, s.proprietary))
        data = srt.compose(subtitles, reindex=False, eol=self.eol).encode("utf-8")
        return b"\xef\xbb\xbf" + data if self.bom else data


def _parse_error(text: str, name: str, error: srt.SRTParseError, read: list[srt.Subtitle]) -> DocumentError:
    """The message for a part of the file that is not a cue: its line, the cue it follows, what it starts with."""
    unmatched: str = error.unmatched_content
    skipped = len(unmatched) - len(unmatched.lstrip())
    line = text.count("\n", 0, error.expected_start + skipped) + 1
    where = f"after cue {read[-1].index}" if read else "before the first cue"
    return DocumentError(f"{name}: line {line} ({where}) is not an SRT cue: {unmatched.strip()[:60]!r}")


def read(data: bytes, name: str) -> SrtDocument:
    """The subtitle file ``data`` (called ``name`` in errors), one unit per cue."""
    text, bom = decode_utf8(data, name)
    subtitles: list[srt.Subtitle] = []
    try:
        for subtitle in srt.parse(text):
            subtitles.append(subtitle)
    except srt.SRTParseError as error:
        raise _parse_error(text, name, error, subtitles) from None
    except srt.TimestampParseError as error:
        after = f"after cue {subtitles[-1].index}" if subtitles else "the first cue"
        raise DocumentError(f"{name}: a timing line ({after}) cannot be read: {error}") from None
    tags: list[_Tag] = []
    units: list[Unit] = []
    cues: list[_Cue] = []
    for subtitle in subtitles:
        unit, breaks = _parse_cue(subtitle.content, tags)
        units.append(unit)
        cues.append(_Cue(subtitle, breaks))
    return SrtDocument(units, cues, tags, bom, "\r\n" if "\r\n" in text else "\n")


FORMAT = Format("srt", (".srt",), "application/x-subrip", read)
