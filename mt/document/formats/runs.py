"""Runs of an office paragraph (.docx, .pptx): stretches of text by run properties, and the base formatting.

A run's properties (``w:rPr``, ``a:rPr``) are XML, compared as bytes (``rpr_key``). Consecutive runs with the
same properties make one stretch of text (``stretches``). A paragraph's base formatting is its most common
one, by characters (``most_common``): a stretch in it is plain text of the unit, a stretch formatted
otherwise an inline whose key stands for its properties (``formatted``, ``Formatting``). A ``RunWriter``
rebuilds runs from a translated tree: text in the properties of the stretch around it, the format's other
elements as the format writes them.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from lxml import etree

from mt.document.formats.paragraphs import keep
from mt.document.model import Element


@dataclass
class Text:
    """A run's text and properties (None: none); ``element`` the text element it was read from, if it matters."""

    rpr: Any
    text: str
    element: Any = None


@dataclass
class Formatting:
    """What an inline's key stands for when it is a stretch of text formatted otherwise than the base."""

    rpr: Any


def rpr_key(rpr: Any) -> bytes:
    """What compares run properties: their XML (empty properties are none)."""
    return b"" if rpr is None or (len(rpr) == 0 and not rpr.attrib) else etree.tostring(rpr, with_tail=False)


def most_common(items: Sequence[Any], default: Any) -> Any:
    """The most common run properties of the ``Text`` in ``items``, by characters (``default``: no text)."""
    counts: Counter[bytes] = Counter()
    first: dict[bytes, Any] = {}
    for item in items:
        if isinstance(item, Text):
            key = rpr_key(item.rpr)
            counts[key] += len(item.text)
            first.setdefault(key, item.rpr)
    return first[counts.most_common(1)[0][0]] if counts else default


def stretches(items: Sequence[Any]) -> list[Any]:
    """``items`` with each series of ``Text`` in the same properties as one ``Text`` (the first's properties and
    element), those without text left out; other items as they are."""
    out: list[Any] = []
    at = 0
    while at < len(items):
        item = items[at]
        at += 1
        if not isinstance(item, Text):
            out.append(item)
            continue
        key, text = rpr_key(item.rpr), item.text
        while at < len(items) and isinstance(next_item := items[at], Text) and rpr_key(next_item.rpr) == key:
            text += next_item.text
            at += 1
        if text:
            out.append(Text(item.rpr, text, item.element))
    return out


def formatted(stretch: Text, base: Any, codes: list[Any]) -> str | Element:
    """A stretch in the ``base`` properties as text, any other as an element around it (its ``Formatting`` kept
    in ``codes``)."""
    if rpr_key(stretch.rpr) == rpr_key(base):
        return stretch.text
    return Element(keep(codes, Formatting(stretch.rpr)), [stretch.text])


class RunWriter(ABC):
    """Rebuilds a paragraph's runs from a translated tree whose keys index ``codes``."""

    def __init__(self, codes: Sequence[Any]) -> None:
        self.codes = codes

    def render(self, nodes: list[str | Element], rpr: Any) -> list[Any]:
        """``nodes`` as the elements of a paragraph (or of a wrapper), text outside ``Formatting`` in ``rpr``."""
        out: list[Any] = []
        for node in nodes:
            if isinstance(node, str):
                out.extend(self.runs(node, rpr))
                continue
            code = self.codes[node.key]
            if isinstance(code, Formatting):
                out.extend(self.render(node.children, code.rpr))
            else:
                out.extend(self.element(code, node.children, rpr))
        return out

    @abstractmethod
    def runs(self, text: str, rpr: Any) -> list[Any]:
        """``text`` as runs in the properties ``rpr``."""

    @abstractmethod
    def element(self, code: Any, children: list[str | Element], rpr: Any) -> list[Any]:
        """What an element other than a ``Formatting`` is written back as (``rpr``: the properties around it)."""
