"""The document model every format reads into and writes back from: units of text with inline elements.

A format (``mt.document.formats``) turns its input into ``Unit``s: one block of translatable text each (a
paragraph, a list item, a table cell, a subtitle cue, a slide's text frame). A unit's inline elements
(bold, a link, a span; Okapi's "inline codes") are ``Inline``s over character offsets of the unit's plain
text, so the sentence around them is translated whole and each element is put back around the target words
its source words were translated into (``mt.document.project``). An element with no translatable text of
its own (an image, a line break, inline code or ``translate="no"`` content) is an ``Inline`` of zero width:
it stays between the words it stood between, and the format writes it back as it was. The format writes
the translated units back through ``nest``: the target text as a tree of the same elements.
"""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass(frozen=True)
class Inline:
    """An inline element around the characters ``[start, end)`` of its unit's text.

    ``key`` is the format's own handle for the element (e.g. an index into the elements it kept);
    ``parent`` the index, in the unit's ``inlines``, of the inline element this one sits in (None: the
    unit itself). Parents come before their children in ``inlines``; siblings are in document order and
    do not overlap. ``start == end``: an element without translatable text, kept where it stood.
    """

    start: int
    end: int
    key: int
    parent: int | None = None


@dataclass
class Unit:
    """One block of translatable text and its inline elements (see the module docstring)."""

    text: str
    inlines: list[Inline] = field(default_factory=list)


@dataclass
class Element:
    """An inline element in the tree ``nest`` builds: its key and its content (text and elements)."""

    key: int
    children: list[str | Element]


def check_inlines(text: str, inlines: list[Inline]) -> None:
    """ValueError unless ``inlines`` are well nested over ``text`` (a format's contract, tested per format)."""
    for i, inline in enumerate(inlines):
        if not 0 <= inline.start <= inline.end <= len(text):
            raise ValueError(f"inline {i} [{inline.start}, {inline.end}) outside the text of {len(text)} characters")
        if inline.parent is not None:
            if not 0 <= inline.parent < i:
                raise ValueError(f"inline {i}: its parent {inline.parent} must come before it")
            outer = inlines[inline.parent]
            if not outer.start <= inline.start <= inline.end <= outer.end:
                raise ValueError(f"inline {i} [{inline.start}, {inline.end}) is not inside its parent {inline.parent}")
    last_end: dict[int | None, int] = {}
    for i, inline in enumerate(inlines):
        if inline.start < last_end.get(inline.parent, 0):
            raise ValueError(f"inline {i} starts before its previous sibling ends")
        last_end[inline.parent] = inline.end


def nest(text: str, inlines: list[Inline]) -> list[str | Element]:
    """``text`` as a tree of the elements ``inlines`` place on it (``check_inlines`` holds): strings for text
    outside any child element, ``Element``s in document order. Empty strings are left out."""
    children: dict[int | None, list[int]] = {}
    for i, inline in enumerate(inlines):
        children.setdefault(inline.parent, []).append(i)

    def build(start: int, end: int, parent: int | None) -> list[str | Element]:
        out: list[str | Element] = []
        at = start
        for i in children.get(parent, []):
            inline = inlines[i]
            if inline.start > at:
                out.append(text[at : inline.start])
            out.append(Element(inline.key, build(inline.start, inline.end, i)))
            at = inline.end
        if end > at:
            out.append(text[at:end])
        return out

    return build(0, len(text), None)


def flatten(tree: list[str | Element]) -> Unit:
    """The unit a tree of text and elements stands for (``nest``'s inverse): what formats build as they read."""
    parts: list[str] = []
    inlines: list[Inline] = []
    length = 0

    def walk(nodes: list[str | Element], parent: int | None) -> None:
        nonlocal length
        for node in nodes:
            if isinstance(node, str):
                parts.append(node)
                length += len(node)
                continue
            start, index = length, len(inlines)
            inlines.append(Inline(start, start, node.key, parent))
            walk(node.children, index)
            inlines[index] = Inline(start, length, node.key, parent)

    walk(tree, None)
    return Unit("".join(parts), inlines)
