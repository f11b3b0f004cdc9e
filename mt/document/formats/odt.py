"""OpenDocument text (.odt): every paragraph and heading with text is a unit, its spans and links are inlines.

The paragraphs (``text:p``, ``text:h``) are those of the body (lists, tables, sections, frames and text boxes,
footnotes and endnotes) and of the page headers and footers. A paragraph inside another's frame or note is a
unit of its own; the frame or note is a zero-width inline of the paragraph it sits in. Comments
(``office:annotation``) and the deleted text of tracked changes are kept and not translated.

Inside a paragraph a ``text:span`` (its style name: bold, a font), a ``text:a`` (a link) and a ``text:meta`` are
inlines around their content, nested as they were. ``text:s`` is spaces in the unit's text (a space the
translation may move or drop, not an element). A tab (``text:tab``) and a line break (``text:line-break``) are
zero-width inlines, as is everything else a paragraph holds besides text (a note, a frame, a bookmark, a
field, a comment): written back as they were (a tab or line break between two words also puts a space between
them in the unit's text: ``spacing``). ``text:soft-page-break`` (where the last layout broke the page) is
dropped. Literal white space is read the way ODF renders it: a run of it is one space, and none at the start
of a paragraph.

Writing re-reads the file with odfpy, rebuilds each unit's paragraph from the translated tree (a span or link
with its attributes, spaces that would collapse as ``text:s``, tabs and line breaks in the translation as
elements) and saves it with odfpy. Styles, pictures and the other parts stay as they were; odfpy does not
write back a digital signature (translating invalidates it anyway).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from io import BytesIO
from typing import Any

from mt.document.errors import DocumentError
from mt.document.formats import Format
from mt.document.formats.archive import check_archive, library_errors
from mt.document.formats.paragraphs import OfficeDocument, Opened, Paragraph, keep, read_document, saved
from mt.document.model import Element, Unit

TEXT = "urn:oasis:names:tc:opendocument:xmlns:text:1.0"
OFFICE = "urn:oasis:names:tc:opendocument:xmlns:office:1.0"
PARAGRAPHS = frozenset(((TEXT, "p"), (TEXT, "h")))
CONTAINERS = frozenset(((TEXT, "span"), (TEXT, "a"), (TEXT, "meta")))
BREAKS = frozenset(((TEXT, "tab"), (TEXT, "line-break")))  # between two words: a space in the unit's text
SKIPPED = frozenset(((OFFICE, "annotation"), (TEXT, "tracked-changes")))  # paragraphs in these stay as they are
DROPPED = frozenset(((TEXT, "soft-page-break"),))
MAX_SPACES = 10_000  # a text:s of more spaces is read as this many (a hostile c="1000000000" is not a gigabyte)
PARTS = ("content.xml", "styles.xml", "meta.xml", "settings.xml", "META-INF/manifest.xml")
WHITE = re.compile(r"[ \t\n\r]+")
PIECES = re.compile(r"(\t)|(\n)|( +)|([^ \t\n]+)")


@dataclass
class _Wrap:
    node: Any  # a span, link or meta: rebuilt with its attributes around the translated content


@dataclass
class _Code:
    node: Any  # written back as it was


_Paragraph = Paragraph[_Wrap | _Code]


def _spaces(node: Any) -> int:
    count = node.attributes.get((TEXT, "c"))
    try:
        return min(max(int(count), 1), MAX_SPACES) if count is not None else 1
    except ValueError:
        return 1


def _tree(nodes: list[Any], codes: list[_Wrap | _Code], last: list[str]) -> list[str | Element]:
    """A paragraph's (or a span's) children as a tree of text and elements; ``last`` holds the last character
    read (a space at the paragraph's start), for white space that ODF collapses."""
    out: list[str | Element] = []
    for node in nodes:
        if node.nodeType == node.TEXT_NODE:
            text = WHITE.sub(" ", node.data)
            if text.startswith(" ") and last[0] == " ":
                text = text[1:]
            if text:
                out.append(text)
                last[0] = text[-1]
        elif node.nodeType != node.ELEMENT_NODE or node.qname in DROPPED:
            continue
        elif node.qname == (TEXT, "s"):
            out.append(" " * _spaces(node))
            last[0] = " "
        elif node.qname in CONTAINERS:
            key = keep(codes, _Wrap(node))
            out.append(Element(key, _tree(node.childNodes, codes, last)))
        else:
            out.append(Element(keep(codes, _Code(node)), []))
    return out


def _is_break(code: _Wrap | _Code) -> bool:
    return isinstance(code, _Code) and code.node.qname in BREAKS


def _paragraph(node: Any) -> _Paragraph:
    codes: list[_Wrap | _Code] = []
    return Paragraph.read(node, _tree(node.childNodes, codes, [" "]), codes, _is_break)


def _find(node: Any, out: list[Any]) -> None:
    """The paragraphs under ``node`` in document order, a paragraph before those in its frames and notes."""
    for child in node.childNodes:
        if child.nodeType != child.ELEMENT_NODE or child.qname in SKIPPED:
            continue
        if child.qname in PARAGRAPHS:
            out.append(child)
        _find(child, out)


def _append_text(parent: Any, text: str, last: list[str]) -> None:
    """``text`` into ``parent`` as ODF keeps it: a space that would collapse (after another, or at the start
    of the paragraph) as ``text:s``, tabs and line breaks as elements."""
    from odf.element import Text
    from odf.text import LineBreak, S, Tab

    buffer: list[str] = []

    def flush() -> None:
        if buffer:
            parent.appendChild(Text("".join(buffer)))
            buffer.clear()

    for match in PIECES.finditer(text):
        tab, newline, spaces, word = match.groups()
        if word is not None:
            buffer.append(word)
            last[0] = word[-1]
            continue
        if spaces is not None:
            literal = 0 if last[0] == " " else 1
            buffer.append(" " * literal)
            if len(spaces) > literal:
                flush()
                parent.appendChild(S(c=len(spaces) - literal) if len(spaces) - literal > 1 else S())
            last[0] = " "
            continue
        flush()
        parent.appendChild(Tab() if tab is not None else LineBreak())
        last[0] = " "
    flush()


def _render(parent: Any, nodes: list[str | Element], codes: list[_Wrap | _Code], last: list[str]) -> None:
    from odf.element import Element as OdfElement

    for node in nodes:
        if isinstance(node, str):
            _append_text(parent, node, last)
            continue
        code = codes[node.key]
        if isinstance(code, _Code):
            _detach(code.node)  # out of the old paragraph (or a span of it)
            parent.appendChild(code.node)
            _render(parent, node.children, codes, last)  # nothing, unless a translation put text in it
            continue
        wrapper = OdfElement(qname=code.node.qname, check_grammar=False)
        wrapper.attributes.update(code.node.attributes)
        parent.appendChild(wrapper)
        _render(wrapper, node.children, codes, last)


def _detach(node: Any) -> None:
    """Take ``node`` out of its parent. Not odfpy's ``removeChild``: that also updates the document's caches of
    elements, and fails on text nodes and on elements the caches never held."""
    parent = node.parentNode
    if parent is None:
        return
    parent.childNodes[:] = [child for child in parent.childNodes if child is not node]
    if node.previousSibling is not None:
        node.previousSibling.nextSibling = node.nextSibling
    if node.nextSibling is not None:
        node.nextSibling.previousSibling = node.previousSibling
    node.parentNode = node.previousSibling = node.nextSibling = None


def _rebuild(paragraph: _Paragraph, translated: Unit) -> None:
    tree = paragraph.translated_tree(translated)
    p = paragraph.element
    for child in list(p.childNodes):
        _detach(child)
    _render(p, tree, paragraph.codes, [" "])


def _load(data: bytes, name: str) -> Any:
    """The odfpy document of the .odt file ``data``; DocumentError if it is broken."""
    check_archive(data, name, kind="odt")
    import zipfile

    # odfpy prints a part it cannot parse and goes on without it: parse them first (never loading a DTD or
    # resolving an entity) so a broken file is an error; odfpy's own parser (defusedxml) refuses entities.
    from defusedxml import DefusedXmlException
    from lxml import etree

    parser = etree.XMLParser(resolve_entities=False, no_network=True, load_dtd=False)
    with library_errors(name, "odt"):
        try:
            with zipfile.ZipFile(BytesIO(data)) as archive:
                for part in PARTS:
                    if part in archive.namelist():
                        etree.fromstring(archive.read(part), parser)
            from odf.opendocument import load

            document = load(BytesIO(data))
        except DefusedXmlException:
            raise DocumentError(f"{name}: not a valid .odt file: it declares XML entities, which are refused") from None
    if document.text is None or not document.mimetype.startswith("application/vnd.oasis.opendocument.text"):
        raise DocumentError(f"{name}: not an OpenDocument text file (its type is {document.mimetype!r})")
    return document


def _open(data: bytes, name: str) -> Opened:
    """The paragraphs with text of the .odt file ``data``: those of the body, then of the master pages (headers,
    footers)."""
    document = _load(data, name)
    nodes: list[Any] = []
    for root in (document.text, document.masterstyles):
        _find(root, nodes)
    return Opened.of(map(_paragraph, nodes), lambda: saved(document))


def read(data: bytes, name: str) -> OfficeDocument:
    """The units of the .odt file ``data`` (``name`` for error messages)."""
    return read_document(data, name, _open, _rebuild)


FORMAT = Format("odt", (".odt",), "application/vnd.oasis.opendocument.text", read)
