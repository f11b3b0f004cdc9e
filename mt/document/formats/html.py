"""HTML: block elements are units, inline elements their inlines; code, scripts and ``translate="no"`` stay.

The input is parsed with ``lxml.html`` (libxml2's recovering HTML parser), as a whole document when it
starts with a doctype or an ``<html>``, ``<head>`` or ``<body>`` tag, else as a fragment that is written back
as a fragment (no wrappers added). Every block element (``p``, ``li``, ``td``, ``h1``, ``title``, ...) holds
runs of text and inline elements between its nested blocks: each run with text is a unit. Inline elements
(``b``, ``a``, ``span``, unknown ones; one that holds a block is a block) are the unit's inlines and keep
their attributes. Zero-width inlines, put back as they were: ``br``, ``img``, ``input`` and the other void
elements, comments, and the elements whose content the model never sees: ``code``, ``pre``, ``script``,
``style``, ``kbd``, ``samp``, ``var``, ``textarea``, ``svg``, ``math``, ``template``, and any element with
``translate="no"`` or the class ``notranslate`` (a block one of these, like ``pre``, separates runs instead).
The attributes ``alt``, ``title``, ``placeholder`` and ``aria-label`` are units of their own, and so are a
button ``input``'s ``value`` and the ``content`` of ``<meta name="description">``.

The model sees text with entities decoded and each run of spaces, tabs and newlines as one space (except
around a zero-width element, which keeps the space on either side); the whitespace a run starts and ends
with is kept as it was. A ``br`` between two words has a space after it, so they stay two words
(``mt.document.formats.spacing``: the writer takes it out again), and a zero-width element that stood
between spaces gets back a space a translation left it without on one side (``spacing.respace``). lxml
escapes on output; a document is written in the charset it was read in. External entities are never
loaded: libxml2's HTML parser reads no DTD. Elements nested more than 256 deep (libxml2 would drop what
lies deeper) are an error.
"""

from __future__ import annotations

import codecs
import re
from dataclasses import dataclass

from lxml import etree
from lxml import html as lxml_html

from mt.document.errors import DocumentError
from mt.document.formats import Format
from mt.document.formats.spacing import Spacing, read_spaced
from mt.document.model import Element, Inline, Unit, flatten

BLOCK_TAGS = frozenset("""
    html head body title meta link base address article aside blockquote caption center col colgroup dd details
    dialog dir div dl dt fieldset figcaption figure footer form frame frameset h1 h2 h3 h4 h5 h6 header hgroup hr
    iframe legend li main menu nav noframes noscript ol optgroup option p pre search section select summary table
    tbody td tfoot th thead tr ul datalist audio video canvas object
""".split())
VOID_TAGS = frozenset("br img wbr input embed area source track param keygen".split())  # inline, no content
SKIP_TAGS = frozenset("code pre script style kbd samp var textarea svg math template".split())
ATTRIBUTES = ("alt", "title", "placeholder", "aria-label")
BUTTON_TYPES = frozenset(("submit", "button", "reset"))  # an input of these types shows its value as its label
ASCII_SPACE = " \t\n\r\f"

DOCUMENT_START = re.compile(r"\A(?:\s|<!--.*?-->)*<(?:!doctype|html|head|body)[\s>/]", re.IGNORECASE | re.DOTALL)
XML_DECLARATION = re.compile(r"\A\s*<\?xml[^>]*\?>\s*", re.IGNORECASE)
META_CHARSET = re.compile(rb"""<meta[^>]*?charset\s*=\s*["']?\s*([A-Za-z0-9_.:-]+)""", re.IGNORECASE)


def _no_translate(element: etree._Element) -> bool:
    """``translate="no"`` or the class ``notranslate``: neither its text nor its attributes are translated."""
    return (element.get("translate") or "").strip().lower() == "no" or "notranslate" in (
        element.get("class") or ""
    ).split()


def _skipped(element: etree._Element) -> bool:
    """An element whose content the model never sees."""
    return element.tag in SKIP_TAGS or _no_translate(element)


def _attribute_names(element: etree._Element) -> tuple[str, ...]:
    """The attributes of ``element`` that hold text a reader sees."""
    if element.tag == "input" and (element.get("type") or "").strip().lower() in BUTTON_TYPES:
        return (*ATTRIBUTES, "value")
    if element.tag == "meta" and (element.get("name") or "").strip().lower() == "description":
        return ("content",)
    return ATTRIBUTES


def _is_element(node: etree._Element) -> bool:
    return isinstance(node.tag, str)  # comments, processing instructions and entities have a function as tag


def _has_block(element: etree._Element) -> bool:
    """Whether a block element sits in ``element`` (not counting the inside of skipped elements)."""
    for child in element:
        if not _is_element(child):
            continue
        if child.tag in BLOCK_TAGS:
            return True
        if not _skipped(child) and _has_block(child):
            return True
    return False


def _squeeze(unit: Unit) -> tuple[Unit, str, str]:
    """The unit the model sees (see the module docstring) and the whitespace ``unit`` starts and ends with."""
    text = unit.text
    points = sorted({inline.start for inline in unit.inlines if inline.start == inline.end})
    words = [i for i, char in enumerate(text) if not char.isspace()]
    lo = min(words[0], points[0]) if points else words[0]
    hi = max(words[-1] + 1, points[-1]) if points else words[-1] + 1
    point_set = set(points)
    before = [0] * (len(text) + 1)  # kept characters before each offset
    kept: list[str] = []
    for i in range(len(text)):
        char = text[i]
        if lo <= i < hi:
            if char not in ASCII_SPACE:
                kept.append(char)
            elif i == lo or text[i - 1] not in ASCII_SPACE or i in point_set:
                kept.append(" ")
        before[i + 1] = len(kept)
    inlines = [Inline(before[inline.start], before[inline.end], inline.key, inline.parent)
               for inline in unit.inlines]
    return Unit("".join(kept), inlines), text[:lo], text[hi:]


@dataclass
class _Kept:
    """An element a unit's inline stands for; ``verbatim``: written back with its content untouched."""

    element: etree._Element
    verbatim: bool


def _split(nodes: list[str | Element], kept: list[_Kept]) -> tuple[str, list[tuple[Element, str]]]:
    """``nodes`` as the text before the first element and (element, text after it) pairs. A verbatim element's
    text (a projection should give it none) follows it rather than being lost."""
    head = ""
    items: list[tuple[Element, str]] = []
    for node in nodes:
        if isinstance(node, str):
            if items:
                items[-1] = (items[-1][0], items[-1][1] + node)
            else:
                head += node
            continue
        spilled = ""
        if kept[node.key].verbatim and node.children:
            spilled, node = flatten(node.children).text, Element(node.key, [])
        items.append((node, spilled))
    return head, items


def _build(node: Element, kept: list[_Kept]) -> etree._Element:
    """The element ``node`` stands for, its content rebuilt from ``node`` unless it is kept verbatim."""
    record = kept[node.key]
    element = record.element
    if record.verbatim:
        return element
    for child in list(element):
        element.remove(child)
    head, items = _split(node.children, kept)
    element.text = head or None
    for child_node, tail in items:
        child = _build(child_node, kept)
        element.append(child)
        child.tail = tail or None
    return element


@dataclass
class _Run:
    """A unit's place: the text and inline elements of ``parent`` after its block child ``before`` (None: from
    its start) up to the next block child; ``children`` its elements, ``lead``/``trail`` its outer whitespace."""

    parent: etree._Element
    before: etree._Element | None
    children: list[etree._Element]
    lead: str
    trail: str
    spacing: Spacing  # around its line breaks and zero-width elements (``mt.document.formats.spacing``)

    def write(self, unit: Unit, kept: list[_Kept]) -> None:
        head, items = _split([self.lead, *self.spacing.tree(unit), self.trail], kept)
        for child in self.children:
            self.parent.remove(child)
        if self.before is None:
            self.parent.text = head or None
            index = 0
        else:
            self.before.tail = head or None
            index = self.parent.index(self.before) + 1
        for node, tail in items:
            child = _build(node, kept)
            self.parent.insert(index, child)
            child.tail = tail or None
            index += 1


@dataclass
class _Attribute:
    """A unit's place: the attribute ``name`` of ``element``, with the whitespace around its value."""

    element: etree._Element
    name: str
    lead: str
    trail: str

    def write(self, unit: Unit, kept: list[_Kept]) -> None:
        self.element.set(self.name, self.lead + unit.text + self.trail)


class _Reader:
    """Walks a parsed tree into units, the places they are written back to and the elements inlines stand for."""

    def __init__(self) -> None:
        self.units: list[Unit] = []
        self.places: list[_Run | _Attribute] = []
        self.kept: list[_Kept] = []

    def block(self, element: etree._Element) -> None:
        """Units from a block element: its attributes, each run of inline content, its nested blocks."""
        self.attributes(element)
        before: etree._Element | None = None
        run: list[etree._Element] = []
        for child in element:
            if _is_element(child) and (
                child.tag in BLOCK_TAGS or (child.tag not in VOID_TAGS and not _skipped(child) and _has_block(child))
            ):
                self.run(element, before, run)
                run = []
                if not _skipped(child):
                    self.block(child)
                elif not _no_translate(child):
                    self.attributes(child)
                before = child
            else:
                run.append(child)
        self.run(element, before, run)

    def run(self, parent: etree._Element, before: etree._Element | None, children: list[etree._Element]) -> None:
        text = parent.text if before is None else before.tail
        tree: list[str | Element] = [text or ""]
        for child in children:
            tree += self.inline(child)
        unit, spacing = read_spaced(tree, lambda key: self.kept[key].element.tag == "br")
        if not unit.text.strip():
            return
        unit, lead, trail = _squeeze(unit)
        self.units.append(unit)
        self.places.append(_Run(parent, before, children, lead, trail, spacing))

    def inline(self, node: etree._Element) -> list[str | Element]:
        """An element of a run as nodes of its unit's tree, followed by its tail."""
        tail = node.tail or ""
        if not _is_element(node) or node.tag in VOID_TAGS or _skipped(node):
            if _is_element(node) and not _no_translate(node):
                self.attributes(node)
            return [Element(self.keep(node, verbatim=True), []), tail]
        self.attributes(node)
        element = Element(self.keep(node, verbatim=False), [node.text or ""])
        for child in node:
            element.children += self.inline(child)
        return [element, tail]

    def keep(self, element: etree._Element, *, verbatim: bool) -> int:
        self.kept.append(_Kept(element, verbatim))
        return len(self.kept) - 1

    def attributes(self, element: etree._Element) -> None:
        for name in _attribute_names(element):
            value = element.get(name)
            if value is None or not value.strip():
                continue
            unit, lead, trail = _squeeze(Unit(value))
            self.units.append(unit)
            self.places.append(_Attribute(element, name, lead, trail))


@dataclass
class HtmlDocument:
    """A parsed HTML document or fragment and the places its units are written back to."""

    units: list[Unit]
    places: list[_Run | _Attribute]
    kept: list[_Kept]
    root: etree._Element  # the html element; a fragment's content is its body's
    fragment: bool
    encoding: str
    prefix: str  # a byte order mark and XML declaration the input started with, written back first
    hard_breaks: bool = False

    def write(self, translated: list[Unit]) -> bytes:
        if len(translated) != len(self.places):
            raise ValueError(f"the HTML has {len(self.places)} units, got {len(translated)} translated")
        for place, unit in zip(self.places, translated, strict=True):
            place.write(unit, self.kept)
        if self.fragment:
            out = "".join(_inner_html(part) for part in self.root)
        else:
            out = etree.tostring(self.root.getroottree(), method="html", encoding="unicode")
        return (self.prefix + out).encode(self.encoding, errors="xmlcharrefreplace")


def _inner_html(element: etree._Element) -> str:
    """What ``element`` holds, serialized (the fragment's wrapper ``head``/``body`` left out)."""
    outer = etree.tostring(element, method="html", encoding="unicode", with_tail=False)
    start = outer.index(">") + 1
    end = outer.rindex("<") if outer.endswith(f"</{element.tag}>") else len(outer)
    return outer[start:end]


def _parse(text: str, name: str, encoding: str, bom: str) -> HtmlDocument:
    """``text`` (the decoded input) parsed and read into units."""
    prefix = bom
    declaration = XML_DECLARATION.match(text)
    if declaration is not None:  # lxml refuses a declaration in a str, and HTML parsing would comment it out
        prefix += declaration.group(0)
        text = text[declaration.end() :]
    fragment = DOCUMENT_START.match(text) is None
    parser = etree.HTMLParser(remove_comments=False, remove_pis=False, default_doctype=False, no_network=True)
    try:
        root = lxml_html.document_fromstring(f"<html><body>{text}</body></html>" if fragment else text, parser)
    except etree.ParserError as error:
        raise DocumentError(f"{name}: no HTML could be read from it ({error})") from None
    except ValueError as error:  # NUL bytes and control characters
        raise DocumentError(f"{name}: not HTML lxml can read ({error})") from None
    limits = [entry.message for entry in parser.error_log if entry.type_name == "ERR_RESOURCE_LIMIT"]
    if limits:  # libxml2 drops what lies deeper than 256 elements: refuse rather than lose text
        raise DocumentError(f"{name}: too deeply nested to read whole ({limits[0]})")
    reader = _Reader()
    if fragment:
        for part in root:
            reader.block(part)
    else:
        reader.block(root)
    return HtmlDocument(reader.units, reader.places, reader.kept, root, fragment, encoding, prefix)


def read(data: bytes, name: str) -> HtmlDocument:
    """The HTML file ``data`` (called ``name`` in errors): UTF-8 unless a ``<meta>`` declares a charset."""
    bom = data.startswith(codecs.BOM_UTF8)
    if bom:
        data = data[len(codecs.BOM_UTF8) :]
    declared = META_CHARSET.search(data[:4096])
    encoding = "utf-8"
    if declared is not None and not bom:
        label = declared.group(1).decode("ascii")
        try:
            encoding = codecs.lookup(label).name
        except LookupError:
            raise DocumentError(f"{name}: declares the charset {label!r}, which is not one mt knows") from None
        if encoding.startswith("utf-16"):  # a meta found in ASCII bytes cannot be right: browsers read UTF-8
            encoding = "utf-8"
    try:
        text = data.decode(encoding)
    except UnicodeDecodeError as error:
        hint = "" if declared is not None else " and declares no other charset"
        raise DocumentError(
            f"{name}: not valid {encoding} (byte 0x{data[error.start]:02x} at offset {error.start}){hint}"
        ) from None
    return _parse(text, name, encoding, "\ufeff" if bom else "")


def read_fragment(text: str, name: str = "the text") -> HtmlDocument:
    """HTML already decoded (a request's ``q``): a fragment or a whole document; ``write`` returns UTF-8."""
    bom = "\ufeff" if text.startswith("\ufeff") else ""
    return _parse(text[len(bom) :], name, "utf-8", bom)


FORMAT = Format("html", (".html", ".htm"), "text/html", read)
