"""PowerPoint presentations (.pptx): every paragraph with text on a slide or its notes is a unit.

The paragraphs are those of every text frame on every slide, in shapes, groups and table cells, then of the
slide's notes. Slide layouts and masters (placeholder prompts, template text), charts and SmartArt are not
translated.

Inside a paragraph, consecutive runs with the same run properties (``a:rPr``) make one stretch of text; the
paragraph's base formatting is its most common one, by characters, and every stretch formatted otherwise is
an inline whose key stands for its ``a:rPr``. A hyperlink lives in its run's properties (``a:hlinkClick``), so
linked words are such an inline and keep their link. Run properties are compared without the flags that
describe the source text (``err``: misspelt, ``dirty``, ``smtClean``, ``smtId``), which are not written back.
A line break (``a:br``) and a field (``a:fld``: a slide number, a date) are zero-width inlines written back as
they were; a line break between two words also puts a space between them in the unit's text (``spacing``).

Writing re-reads the file and rebuilds each unit's paragraph between its ``a:pPr`` and ``a:endParaRPr``: text
outside inlines in the base formatting, text in an inline in that inline's ``a:rPr``. Everything else
(layouts, pictures, positions, animations) stays as it was.
"""

from __future__ import annotations

import copy
from dataclasses import dataclass
from io import BytesIO
from typing import Any

from lxml import etree

from mt.document.formats import Format
from mt.document.formats.archive import check_archive, library_errors
from mt.document.formats.paragraphs import OfficeDocument, Opened, Paragraph, keep, read_document, saved
from mt.document.formats.runs import Formatting, RunWriter, Text, formatted, most_common, stretches
from mt.document.model import Element, Unit

A = "http://schemas.openxmlformats.org/drawingml/2006/main"
STALE = ("err", "dirty", "smtClean", "smtId")  # a:rPr attributes about the source text


def a(tag: str) -> str:
    """The Clark name of a DrawingML tag (``a("p")``)."""
    return f"{{{A}}}{tag}"


KEPT = frozenset((a("pPr"), a("endParaRPr")))


@dataclass
class _Code:
    element: Any  # written back as it was


_Paragraph = Paragraph[Formatting | _Code]


def _items(p: Any) -> list[Text | _Code]:
    """A paragraph's runs as ``Text`` (their properties without the flags about the source text), and the
    other elements it holds as ``_Code``."""
    items: list[Text | _Code] = []
    for child in p:
        if not isinstance(child.tag, str) or child.tag in KEPT:
            continue
        if child.tag != a("r"):
            items.append(_Code(child))
            continue
        rpr = child.find(a("rPr"))
        if rpr is not None:
            for name in STALE:
                rpr.attrib.pop(name, None)
        t = child.find(a("t"))
        # An unresolved entity reference is a child node of a:t: keep the text around it, never what it names.
        text = "" if t is None else (t.text or "") + "".join(c.tail or "" for c in t)
        items.append(Text(rpr, text))
    return items


def _is_break(code: Formatting | _Code) -> bool:
    return isinstance(code, _Code) and code.element.tag == a("br")


def _paragraph(p: Any) -> _Paragraph:
    items = _items(p)
    base = most_common(items, None)
    codes: list[Formatting | _Code] = []
    tree: list[str | Element] = []
    for item in stretches(items):
        if isinstance(item, Text):
            tree.append(formatted(item, base, codes))
        else:
            tree.append(Element(keep(codes, item), []))
    return Paragraph.read(p, tree, codes, _is_break, base)


def _new(tag: str, rpr: Any) -> Any:
    """A new ``a:<tag>`` element holding a copy of the run properties ``rpr`` (None: none)."""
    from pptx.oxml import parse_xml

    element = parse_xml(f'<a:{tag} xmlns:a="{A}"/>')
    if rpr is not None:
        element.append(copy.deepcopy(rpr))
    return element


class _Writer(RunWriter):
    """A translated tree as the runs and elements of a paragraph."""

    def runs(self, text: str, rpr: Any) -> list[Any]:
        """``text`` as runs in ``rpr``, a line break in it as ``a:br``."""
        out = []
        for i, line in enumerate(text.split("\n")):
            if i:
                out.append(_new("br", rpr))
            if line:
                run = _new("r", rpr)
                t = etree.SubElement(run, a("t"))
                t.text = line
                out.append(run)
        return out

    def element(self, code: _Code, children: list[str | Element], rpr: Any) -> list[Any]:
        # its children: nothing, unless a translation put text in it
        return [code.element, *self.render(children, rpr)]


def _rebuild(paragraph: _Paragraph, translated: Unit) -> None:
    # Render first: it moves the verbatim elements out of the paragraph, whose old runs are removed after.
    content = _Writer(paragraph.codes).render(paragraph.translated_tree(translated), paragraph.base)
    p = paragraph.element
    for child in list(p):
        if child.tag not in KEPT:
            p.remove(child)
    at = 1 if len(p) and p[0].tag == a("pPr") else 0
    p[at:at] = content


def _load(data: bytes, name: str) -> tuple[Any, list[Any]]:
    """The python-pptx presentation and the root elements of its slides and their notes, in order."""
    check_archive(data, name, kind="pptx")
    import pptx

    with library_errors(name, "pptx"):
        presentation = pptx.Presentation(BytesIO(data))
        roots = []
        for slide in presentation.slides:
            roots.append(slide.element)
            if slide.has_notes_slide:  # asking for slide.notes_slide would add one
                roots.append(slide.notes_slide.element)
    return presentation, roots


def _open(data: bytes, name: str) -> Opened:
    """The paragraphs with text of the .pptx file ``data``: those of its slides, each slide's notes after it."""
    presentation, roots = _load(data, name)
    return Opened.of((_paragraph(p) for root in roots for p in root.iter(a("p"))), lambda: saved(presentation))


def read(data: bytes, name: str) -> OfficeDocument:
    """The units of the .pptx file ``data`` (``name`` for error messages)."""
    return read_document(data, name, _open, _rebuild)


FORMAT = Format(
    "pptx", (".pptx",), "application/vnd.openxmlformats-officedocument.presentationml.presentation", read
)
