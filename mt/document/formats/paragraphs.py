"""Office files (.docx, .pptx, .odt) as paragraphs: every paragraph with text is a unit, rebuilt in place.

A format reads a paragraph into a tree of text and elements (``mt.document.model``) whose keys index the
paragraph's ``codes``: what the format keeps to write each element back. ``Paragraph.read`` puts a space
after each break between two words (``spacing.pad``) and flattens the tree into the unit;
``Paragraph.translated_tree`` is the way back. An ``OfficeDocument`` keeps only the file's bytes and its
units: ``write`` re-reads the file (``load``), rebuilds each paragraph from its translated unit
(``rebuild``) and saves it.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from io import BytesIO
from typing import Any, Generic, TypeVar

from mt.document.formats.spacing import pad, unpad
from mt.document.model import Element, Unit, flatten, nest

Code = TypeVar("Code")


@dataclass
class Paragraph(Generic[Code]):
    """A paragraph read into ``unit``: ``codes[key]`` is what each inline key stands for, ``base`` the run
    properties of text outside inlines (formats with run properties: .docx, .pptx)."""

    element: Any  # the paragraph's element: w:p, a:p, text:p or text:h
    unit: Unit
    codes: list[Code]
    base: Any = None
    padded: set[int] = field(default_factory=set)  # keys of the breaks a space was put after (``spacing``)

    @classmethod
    def read(
        cls,
        element: Any,
        tree: list[str | Element],
        codes: list[Code],
        is_break: Callable[[Code], bool],
        base: Any = None,
    ) -> Paragraph[Code]:
        """The paragraph ``element``, read into ``tree``: its unit has a space after each element ``is_break``
        picks that stands between two words."""
        padded = pad(tree, lambda key: is_break(codes[key]))
        return cls(element, flatten(tree), codes, base, padded)

    def translated_tree(self, translated: Unit) -> list[str | Element]:
        """The translation of this paragraph as a tree to write back, the spaces ``read`` added taken out."""
        tree = nest(translated.text, translated.inlines)
        unpad(tree, self.padded)
        return tree


def keep(codes: list[Code], code: Code) -> int:
    """Append ``code`` to ``codes``: the key of the element it stands for."""
    codes.append(code)
    return len(codes) - 1


@dataclass
class Opened:
    """An office file opened to be written: its paragraphs with text (in document order) and what saves it."""

    paragraphs: list[Paragraph[Any]]
    save: Callable[[], bytes]

    @classmethod
    def of(cls, paragraphs: Iterable[Paragraph[Any]], save: Callable[[], bytes]) -> Opened:
        """The paragraphs with text among ``paragraphs``."""
        return cls([paragraph for paragraph in paragraphs if paragraph.unit.text.strip()], save)


def saved(package: Any) -> bytes:
    """The bytes ``package.save(stream)`` writes (a python-docx, python-pptx or odfpy document)."""
    out = BytesIO()
    package.save(out)
    return out.getvalue()


@dataclass
class OfficeDocument:
    """A read office file: its units; ``write`` re-reads ``data`` and rebuilds the units' paragraphs."""

    data: bytes
    name: str
    units: list[Unit]
    load: Callable[[bytes, str], Opened]  # the format's reader: ``load(data, name)``
    rebuild: Callable[[Any, Unit], None]  # the format's writer: ``rebuild(paragraph, translated)``
    hard_breaks: bool = False

    def write(self, translated: list[Unit]) -> bytes:
        opened = self.load(self.data, self.name)
        paragraphs = opened.paragraphs
        if len(translated) != len(paragraphs):
            raise ValueError(f"{self.name}: {len(translated)} translated units for {len(paragraphs)} paragraphs")
        for paragraph, unit in zip(paragraphs, translated, strict=True):
            self.rebuild(paragraph, unit)
        return opened.save()


def read_document(
    data: bytes, name: str, load: Callable[[bytes, str], Opened], rebuild: Callable[[Any, Unit], None]
) -> OfficeDocument:
    """The office file ``data`` (``name`` for error messages), its units those of the paragraphs ``load`` finds."""
    units = [paragraph.unit for paragraph in load(data, name).paragraphs]
    return OfficeDocument(data, name, units, load, rebuild)
