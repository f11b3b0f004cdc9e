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
from collections import Counter
from dataclasses import dataclass, field
from io import BytesIO
from typing import Any

from lxml import etree

from mt.document.errors import DocumentError
from mt.document.formats import Format
from mt.document.formats.archive import check_archive, library_error
from mt.document.formats.spacing import pad, unpad
from mt.document.model import Element, Unit, flatten, nest

A = "http://schemas.openxmlformats.org/drawingml/2006/main"
STALE = ("err", "dirty", "smtClean", "smtId")  # a:rPr attributes about the source text


def a(tag: str) -> str:
    """The Clark name of a DrawingML tag (``a("p")``)."""
    return f"{{{A}}}{tag}"


KEPT = frozenset((a("pPr"), a("endParaRPr")))


@dataclass
class _Text:
    rpr: Any  # the run's a:rPr (None: none)
    text: str


@dataclass
class _Format:
    rpr: Any


@dataclass
class _Code:
    element: Any  # written back as it was


@dataclass
class _Paragraph:
    element: Any  # the a:p
    unit: Unit
    base: Any
    codes: list[_Format | _Code] = field(default_factory=list)
    padded: set[int] = field(default_factory=set)  # keys of the line breaks a space was put after (``spacing``)


def _rpr_key(rpr: Any) -> bytes:
    """What compares run properties: their XML (empty properties are none)."""
    return b"" if rpr is None or (len(rpr) == 0 and not rpr.attrib) else etree.tostring(rpr, with_tail=False)


def _items(p: Any) -> list[_Text | _Code]:
    items: list[_Text | _Code] = []
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
        items.append(_Text(rpr, text))
    return items


def _paragraph(p: Any) -> _Paragraph:
    items = _items(p)
    counts: Counter[bytes] = Counter()
    first: dict[bytes, Any] = {}
    for item in items:
        if isinstance(item, _Text):
            counts[_rpr_key(item.rpr)] += len(item.text)
            first.setdefault(_rpr_key(item.rpr), item.rpr)
    base_key = counts.most_common(1)[0][0] if counts else b""
    found = _Paragraph(p, Unit(""), first.get(base_key))
    tree: list[str | Element] = []
    at = 0
    while at < len(items):
        item = items[at]
        at += 1
        if isinstance(item, _Code):
            found.codes.append(item)
            tree.append(Element(len(found.codes) - 1, []))
            continue
        key, text = _rpr_key(item.rpr), item.text
        while at < len(items) and isinstance(items[at], _Text) and _rpr_key(items[at].rpr) == key:
            text += items[at].text
            at += 1
        if not text:
            continue
        if key == base_key:
            tree.append(text)
        else:
            found.codes.append(_Format(item.rpr))
            tree.append(Element(len(found.codes) - 1, [text]))
    codes = found.codes
    found.padded = pad(tree, lambda key: isinstance(codes[key], _Code) and codes[key].element.tag == a("br"))
    found.unit = flatten(tree)
    return found


def _runs(text: str, rpr: Any) -> list[Any]:
    """``text`` as runs in ``rpr``, a line break in it as ``a:br``."""
    from pptx.oxml import parse_xml

    out = []
    for i, line in enumerate(text.split("\n")):
        if i:
            br = parse_xml(f'<a:br xmlns:a="{A}"/>')
            if rpr is not None:
                br.append(copy.deepcopy(rpr))
            out.append(br)
        if line:
            run = parse_xml(f'<a:r xmlns:a="{A}"/>')
            if rpr is not None:
                run.append(copy.deepcopy(rpr))
            t = etree.SubElement(run, a("t"))
            t.text = line
            out.append(run)
    return out


def _render(nodes: list[str | Element], rpr: Any, codes: list[_Format | _Code]) -> list[Any]:
    out: list[Any] = []
    for node in nodes:
        if isinstance(node, str):
            out.extend(_runs(node, rpr))
            continue
        code = codes[node.key]
        if isinstance(code, _Code):
            out.append(code.element)
            out.extend(_render(node.children, rpr, codes))  # nothing, unless a translation put text in it
        else:
            out.extend(_render(node.children, code.rpr, codes))
    return out


def _rebuild(paragraph: _Paragraph, translated: Unit) -> None:
    # Render first: it moves the verbatim elements out of the paragraph, whose old runs are removed after.
    tree = nest(translated.text, translated.inlines)
    unpad(tree, paragraph.padded)
    content = _render(tree, paragraph.base, paragraph.codes)
    p = paragraph.element
    for child in list(p):
        if child.tag not in KEPT:
            p.remove(child)
    at = 1 if len(p) and p[0].tag == a("pPr") else 0
    p[at:at] = content


def _open(data: bytes, name: str) -> tuple[Any, list[Any]]:
    """The python-pptx presentation and the root elements of its slides and their notes, in order."""
    check_archive(data, name, kind="pptx")
    import pptx

    try:
        presentation = pptx.Presentation(BytesIO(data))
        roots = []
        for slide in presentation.slides:
            roots.append(slide.element)
            if slide.has_notes_slide:  # asking for slide.notes_slide would add one
                roots.append(slide.notes_slide.element)
    except DocumentError:
        raise
    except Exception as error:  # whatever python-pptx or lxml raise on a broken package: the user's file
        raise library_error(name, "pptx", error) from None
    return presentation, roots


def _paragraphs(roots: list[Any]) -> list[_Paragraph]:
    found = [_paragraph(p) for root in roots for p in root.iter(a("p"))]
    return [paragraph for paragraph in found if paragraph.unit.text.strip()]


@dataclass
class PptxDocument:
    """A read .pptx: its units; ``write`` re-reads ``data`` and rebuilds the units' paragraphs."""

    data: bytes
    name: str
    units: list[Unit]
    hard_breaks: bool = False

    def write(self, translated: list[Unit]) -> bytes:
        presentation, roots = _open(self.data, self.name)
        paragraphs = _paragraphs(roots)
        if len(translated) != len(paragraphs):
            raise ValueError(f"{self.name}: {len(translated)} translated units for {len(paragraphs)} paragraphs")
        for paragraph, unit in zip(paragraphs, translated, strict=True):
            _rebuild(paragraph, unit)
        out = BytesIO()
        presentation.save(out)
        return out.getvalue()


def read(data: bytes, name: str) -> PptxDocument:
    """The units of the .pptx file ``data`` (``name`` for error messages)."""
    _, roots = _open(data, name)
    return PptxDocument(data, name, [paragraph.unit for paragraph in _paragraphs(roots)])


FORMAT = Format(
    "pptx", (".pptx",), "application/vnd.openxmlformats-officedocument.presentationml.presentation", read
)
