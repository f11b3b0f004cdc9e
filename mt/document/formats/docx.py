"""Word documents (.docx): every paragraph with text is a unit, its run formatting and links are inlines.

The paragraphs are those of the body (tables and nested tables, content controls, text boxes), of every header
and footer, and of the footnotes and endnotes. A text box's paragraphs are units of their own: the drawing
that holds them is a zero-width inline of the paragraph it is anchored in. Word stores a text box twice (the
drawing and its VML fallback for old readers); both copies are units and both are translated.

Inside a paragraph, consecutive runs with the same run properties (``w:rPr``) make one stretch of text. The
paragraph's base formatting is its most common one, by characters; every stretch formatted otherwise is an
inline whose key stands for its ``w:rPr``. A hyperlink (and the other elements that wrap runs: ``w:ins``,
``w:smartTag``, ``w:customXml``, ``w:sdt``, ``w:fldSimple``, ``w:dir``, ``w:bdo``) is an inline around its
runs' inlines, with a base formatting of its own. A complex field (``w:fldChar`` begin ... end) is an inline
around its displayed result: its instruction and end marker are written back as they were, around the
translated result. Everything else a run or paragraph holds besides text (a drawing, a tab, a break, a
footnote reference, a bookmark, a math zone, a tracked deletion) is a zero-width inline written back verbatim;
a break or tab between two words also puts a space between them in the unit's text (``spacing``).
Spell-check marks (``w:proofErr``), soft hyphens and rendered page breaks are dropped: they describe the source
text. Comments are left untranslated.

Writing re-reads the file and rebuilds each unit's paragraph: text outside inlines in the base formatting,
text in an inline in that inline's ``w:rPr``, wrappers with their attributes (a hyperlink keeps its
relationship id), verbatim elements moved back in place. Run-level revision ids (``w:rsid*``) are not kept.
Styles, numbering, section properties, images and every other part stay as they were.
"""

from __future__ import annotations

import copy
from dataclasses import dataclass, field
from io import BytesIO
from typing import Any

from mt.document.formats import Format
from mt.document.formats.archive import check_archive, library_errors
from mt.document.formats.paragraphs import OfficeDocument, Opened, Paragraph, keep, read_document, saved
from mt.document.formats.runs import Formatting, RunWriter, Text, formatted, most_common, stretches
from mt.document.model import Element, Unit

W = "http://schemas.openxmlformats.org/wordprocessingml/2006/main"
XML_SPACE = "{http://www.w3.org/XML/1998/namespace}space"


def w(tag: str) -> str:
    """The Clark name of a WordprocessingML tag (``w("p")``)."""
    return f"{{{W}}}{tag}"


# Elements that wrap runs: an inline around their content (``w:sdt`` holds it in ``w:sdtContent``).
CONTAINERS = frozenset(
    w(t) for t in ("hyperlink", "ins", "moveTo", "smartTag", "customXml", "sdt", "fldSimple", "dir", "bdo")
)
BREAKS = frozenset(w(t) for t in ("br", "cr", "tab", "ptab"))  # between two words: a space in the unit's text
DROPPED = frozenset(w(t) for t in ("proofErr", "lastRenderedPageBreak", "softHyphen"))
STORY_TYPES = (
    "application/vnd.openxmlformats-officedocument.wordprocessingml.document.main+xml",
    "application/vnd.openxmlformats-officedocument.wordprocessingml.header+xml",
    "application/vnd.openxmlformats-officedocument.wordprocessingml.footer+xml",
    "application/vnd.openxmlformats-officedocument.wordprocessingml.footnotes+xml",
    "application/vnd.openxmlformats-officedocument.wordprocessingml.endnotes+xml",
)


# A paragraph's content as read: text of a run (``Text``, its element the w:t), a verbatim element, a wrapper,
# a complex field.
@dataclass
class _Code:
    element: Any  # written back as it was: inside a new run with a copy of ``rpr`` when ``in_run``
    in_run: bool
    rpr: Any = None


@dataclass
class _Container:
    element: Any
    items: list[_Item]


@dataclass
class _Field:
    begin: list[_Code]  # fldChar begin, the instruction, fldChar separate
    items: list[_Item]  # the displayed result
    end: list[_Code]  # fldChar end (empty: the field ends in a later paragraph)


_Item = Text | _Code | _Container | _Field


# What an inline's key stands for when writing: a ``Formatting``, a ``_Code`` or a wrapper.
@dataclass
class _Wrap:
    element: Any  # a _Container's element or a _Field
    base: Any  # the w:rPr of text directly inside it


_Paragraph = Paragraph[Formatting | _Code | _Wrap]


@dataclass
class _Story:
    """A part holding paragraphs; ``part`` set when its XML is not python-docx's to serialize (footnotes)."""

    root: Any
    part: Any = None

    def save(self) -> None:
        if self.part is not None:
            from docx.opc.oxml import serialize_part_xml

            self.part._blob = serialize_part_xml(self.root)  # python-docx 1.2 keeps a plain part's bytes here


def _text_of(t: Any) -> str:
    # An unresolved entity reference is a child node: keep the text around it, never what it names.
    return (t.text or "") + "".join(child.tail or "" for child in t)


def _content(element: Any) -> Any:
    """The element whose children are a wrapper's runs (None: a content control without content)."""
    return element.find(w("sdtContent")) if element.tag == w("sdt") else element


def _items(children: Any) -> list[_Item]:
    """A paragraph's (or wrapper's) children as items, complex fields grouped."""
    items: list[_Item] = []
    for child in children:
        if not isinstance(child.tag, str) or child.tag in DROPPED or child.tag == w("pPr"):
            continue  # comments, processing instructions, entities; the paragraph's properties stay put
        if child.tag == w("r"):
            rpr = child.find(w("rPr"))
            for part in child:
                if not isinstance(part.tag, str) or part.tag in DROPPED or part.tag == w("rPr"):
                    continue
                if part.tag == w("t"):
                    items.append(Text(rpr, _text_of(part), part))
                else:
                    items.append(_Code(part, True, rpr))
        elif child.tag in CONTAINERS and _content(child) is not None:
            inner = [c for c in _content(child) if not (isinstance(c.tag, str) and c.tag.endswith("Pr"))]
            items.append(_Container(child, _items(inner)))
        else:
            items.append(_Code(child, False))
    return _fields(items)


def _fld_type(item: _Item) -> str | None:
    if isinstance(item, _Code) and item.element.tag == w("fldChar"):
        return item.element.get(w("fldCharType"))
    return None


def _verbatim(item: _Item) -> _Code:
    """An item of a field's instruction, kept as it was."""
    if isinstance(item, Text):
        return _Code(item.element, True, item.rpr)
    if isinstance(item, _Container):
        return _Code(item.element, False)
    assert isinstance(item, _Code), "a field's instruction is read before fields are grouped"
    return item


@dataclass
class _Open:
    begin: list[_Code]
    result: list[_Item] = field(default_factory=list)
    in_result: bool = False
    depth: int = 0  # fields nested in the instruction


def _fields(items: list[_Item]) -> list[_Item]:
    """Group each complex field (begin, instruction, separate, result, end) into a ``_Field``. Markers without
    their partner (a field begun in an earlier paragraph) stay verbatim items."""
    top: list[_Item] = []
    stack: list[_Open] = []
    for item in items:
        kind = _fld_type(item)
        if stack and not stack[-1].in_result:
            frame = stack[-1]
            frame.begin.append(_verbatim(item))
            if kind == "begin":
                frame.depth += 1
            elif kind == "end" and frame.depth:
                frame.depth -= 1
            elif kind == "end":  # a field without a displayed result: all of it verbatim
                stack.pop()
                (stack[-1].result if stack else top).extend(frame.begin)
            elif kind == "separate" and not frame.depth:
                frame.in_result = True
            continue
        if kind == "begin":
            stack.append(_Open([_verbatim(item)]))
        elif kind == "end" and stack:
            frame = stack.pop()
            (stack[-1].result if stack else top).append(_Field(frame.begin, frame.result, [_verbatim(item)]))
        else:
            (stack[-1].result if stack else top).append(item)
    while stack:  # fields that end in a later paragraph
        frame = stack.pop()
        done: list[_Item] = [_Field(frame.begin, frame.result, [])] if frame.in_result else list(frame.begin)
        (stack[-1].result if stack else top).extend(done)
    return top


def _tree(items: list[_Item], base: Any, codes: list[Formatting | _Code | _Wrap]) -> list[str | Element]:
    """Items as a tree of text and elements; ``codes[key]`` records what each element's key stands for."""
    out: list[str | Element] = []
    for item in stretches(items):
        if isinstance(item, Text):
            out.append(formatted(item, base, codes))
        elif isinstance(item, _Code):
            out.append(Element(keep(codes, item), []))
        else:
            inner = most_common(item.items, base)
            key = keep(codes, _Wrap(item.element if isinstance(item, _Container) else item, inner))
            out.append(Element(key, _tree(item.items, inner, codes)))
    return out


def _is_break(code: Formatting | _Code | _Wrap) -> bool:
    return isinstance(code, _Code) and code.element.tag in BREAKS


def _paragraph(p: Any) -> _Paragraph:
    items = _items(p)
    base = most_common(items, None)
    codes: list[Formatting | _Code | _Wrap] = []
    return Paragraph.read(p, _tree(items, base, codes), codes, _is_break, base)


def _run(rpr: Any, *content: Any) -> Any:
    from docx.oxml import OxmlElement

    run = OxmlElement("w:r")
    if rpr is not None:
        run.append(copy.deepcopy(rpr))
    run.extend(content)
    return run


def _emit(code: _Code) -> Any:
    return _run(code.rpr, code.element) if code.in_run else code.element


class _Writer(RunWriter):
    """A translated tree as the elements of a paragraph (or of a wrapper)."""

    def runs(self, text: str, rpr: Any) -> list[Any]:
        """``text`` as one run in ``rpr``: tabs and line breaks in it become ``w:tab`` and ``w:br``."""
        from docx.oxml import OxmlElement

        content = []
        for i, line in enumerate(text.split("\n")):
            if i:
                content.append(OxmlElement("w:br"))
            for j, piece in enumerate(line.split("\t")):
                if j:
                    content.append(OxmlElement("w:tab"))
                if piece:
                    t = OxmlElement("w:t")
                    t.text = piece
                    if piece != piece.strip():
                        t.set(XML_SPACE, "preserve")
                    content.append(t)
        return [_run(rpr, *content)] if content else []

    def element(self, code: _Code | _Wrap, children: list[str | Element], rpr: Any) -> list[Any]:
        if isinstance(code, _Code):  # its children: nothing, unless a translation put text in it
            return [_emit(code), *self.render(children, rpr)]
        if isinstance(code.element, _Field):
            begin, end = code.element.begin, code.element.end
            return [*map(_emit, begin), *self.render(children, code.base), *map(_emit, end)]
        wrapper = copy.deepcopy(code.element)  # its attributes and properties (w:sdtPr), without its runs
        holder = _content(wrapper)
        for child in list(holder):
            if not (isinstance(child.tag, str) and child.tag.endswith("Pr")):
                holder.remove(child)
        holder.extend(self.render(children, code.base))
        return [wrapper]


def _rebuild(paragraph: _Paragraph, translated: Unit) -> None:
    # Render first: it moves the verbatim elements out of the old runs, which are removed after.
    content = _Writer(paragraph.codes).render(paragraph.translated_tree(translated), paragraph.base)
    p = paragraph.element
    for child in list(p):
        if child.tag != w("pPr"):
            p.remove(child)
    p.extend(content)


def _load(data: bytes, name: str) -> tuple[Any, list[_Story]]:
    """The python-docx document and its stories: the body, then headers, footers, footnotes, endnotes."""
    check_archive(data, name, kind="docx")
    import docx
    from docx.opc.part import XmlPart
    from docx.oxml.parser import parse_xml

    with library_errors(name, "docx"):
        document = docx.Document(BytesIO(data))
        parts = [p for p in document.part.package.iter_parts() if p.content_type in STORY_TYPES]
        parts.sort(key=lambda p: (p is not document.part, STORY_TYPES.index(p.content_type), str(p.partname)))
        stories = [_Story(p.element) if isinstance(p, XmlPart) else _Story(parse_xml(p.blob), p) for p in parts]
    return document, stories


def _open(data: bytes, name: str) -> Opened:
    """The paragraphs with text of the .docx file ``data``, in document order (a text box's after the paragraph
    it is anchored in)."""
    document, stories = _load(data, name)

    def save() -> bytes:
        for story in stories:
            story.save()
        return saved(document)

    return Opened.of((_paragraph(p) for story in stories for p in story.root.iter(w("p"))), save)


def read(data: bytes, name: str) -> OfficeDocument:
    """The units of the .docx file ``data`` (``name`` for error messages)."""
    return read_document(data, name, _open, _rebuild)


FORMAT = Format(
    "docx", (".docx",), "application/vnd.openxmlformats-officedocument.wordprocessingml.document", read
)
