"""Markdown (CommonMark, with GitHub's tables and strikethrough): each block's inline content is one unit.

markdown-it-py parses the file; the inline content of every paragraph, heading and table cell (so of list
items and block quotes too) is a unit. Emphasis, strong emphasis, strikethrough and links are its inlines
(a link's URL and title are kept); inline code, raw inline HTML, autolinks, images and hard line breaks are
zero-width inlines, written back as they were. An image whose description is plain text has it as a unit
of its own. Code blocks, fenced code, HTML blocks and link reference definitions are never seen by the
model. A soft line break is a space (``hard_breaks`` False); a hard one between two words has a space after
it, so they stay two words (``mt.document.formats.spacing``: the writer takes it out again), and inline
code or an image that stood between spaces keeps a space on both sides (``spacing.respace``).

The writer renders the changed token stream with mdformat's renderer, with a small renderer for tables and
strikethrough of its own (mdformat's core renders neither). The output is Markdown with the same structure,
normalised the way mdformat formats it: a document written back untranslated renders to the same HTML,
but may differ in its source (list markers, emphasis markers, escapes, a paragraph's soft line breaks
joined into one line, tables unpadded). Front matter (``---`` or ``+++`` at the top) is kept as it is, not
translated. The file must be UTF-8; CRLF line ends are kept.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from types import SimpleNamespace
from typing import Any

from markdown_it import MarkdownIt
from markdown_it.token import Token
from mdformat.renderer import MDRenderer, RenderContext, RenderTreeNode

from mt.document.errors import DocumentError
from mt.document.formats import Format
from mt.document.formats.spacing import Spacing, read_spaced
from mt.document.formats.text import decode_utf8
from mt.document.model import Element, Unit, flatten

# YAML (---) or TOML (+++) front matter at the top of a file: metadata for a site generator, kept as it is
FRONT_MATTER = re.compile(
    r"\A(---|\+\+\+)[ \t]*\r?\n.*?^\1[ \t]*(?:\r?\n|\Z)(?:[ \t]*\r?\n)*", re.DOTALL | re.MULTILINE
)
ALT_SPECIALS = re.compile(r"([\\\[\]*_`<])")  # escaped in an image description, which mdformat writes as given
MAX_NESTING = 50  # levels of block quotes, lists and inline markup read; deeper would overflow Python's stack
ALIGNMENT = {"text-align:left": ":--", "text-align:center": ":-:", "text-align:right": "--:"}


def _cell(node: RenderTreeNode, context: RenderContext) -> str:
    """A table cell's content on one line, its pipes escaped (GitHub unescapes them even inside code)."""
    return "".join(child.render(context) for child in node.children).replace("|", "\\|").replace("\n", " ")


def _table(node: RenderTreeNode, context: RenderContext) -> str:
    """A GitHub table: header row, delimiter row with the columns' alignment, body rows (not padded)."""
    lines: list[str] = []
    for section in node.children:  # thead, tbody
        for row in section.children:
            lines.append("| " + " | ".join(_cell(cell, context) for cell in row.children) + " |")
            if section.type == "thead":
                delimiters = (ALIGNMENT.get(str(cell.attrs.get("style", "")), "---") for cell in row.children)
                lines.append("| " + " | ".join(delimiters) + " |")
    return "\n".join(lines)


def _strikethrough(node: RenderTreeNode, context: RenderContext) -> str:
    return node.markup + "".join(child.render(context) for child in node.children) + node.markup


# blocks whose content markdown-it parses one level deeper, and leaves out once that reaches MAX_NESTING
CONTAINERS = ("blockquote_open", "list_item_open")
# what mdformat's renderer takes a parser extension to be: renderers by syntax node type
GFM_RENDERING = SimpleNamespace(RENDERERS={"table": _table, "s": _strikethrough}, POSTPROCESSORS={})


def _parser() -> MarkdownIt:
    """CommonMark with tables and strikethrough, set up as mdformat sets up its own parser."""
    parser = MarkdownIt("commonmark", {"store_labels": True, "maxNesting": MAX_NESTING}, renderer_cls=MDRenderer)
    parser.enable(["table", "strikethrough"])
    parser.options["mdformat"] = {}
    parser.options["parser_extension"] = [GFM_RENDERING]
    parser.options["codeformatters"] = {}
    return parser


@dataclass
class _Kept:
    """What an inline stands for: an opening token and its ``close`` around translated content, or (``close``
    None) tokens written back as they were."""

    tokens: list[Token]
    close: Token | None = None


def _text(content: str) -> Token:
    # the unit's text has no line breaks of its own: one here would end a heading or a table row
    return Token("text", "", 0, content=content.replace("\r", " ").replace("\n", " "))


@dataclass
class _Inline:
    """A unit's place: an ``inline`` token, whose children are rebuilt from the translation."""

    token: Token
    spacing: Spacing  # around its hard breaks and zero-width elements (``mt.document.formats.spacing``)

    def write(self, unit: Unit, kept: list[_Kept]) -> None:
        children = [t for t in _tokens(self.spacing.tree(unit), kept) if t.type != "text" or t.content]
        while children and children[-1].type == "hardbreak":  # a break ending a block would be a literal "\"
            children.pop()
        while children and children[0].type == "hardbreak":
            children.pop(0)
        self.token.children = children


@dataclass
class _Alt:
    """A unit's place: an image's description."""

    token: Token

    def write(self, unit: Unit, kept: list[_Kept]) -> None:
        self.token.content = unit.text
        self.token.children = [_text(ALT_SPECIALS.sub(r"\\\1", unit.text))]


def _tokens(nodes: list[str | Element], kept: list[_Kept]) -> list[Token]:
    """The inline tokens a unit's tree stands for."""
    out: list[Token] = []
    for node in nodes:
        if isinstance(node, str):
            out.append(_text(node))
            continue
        record = kept[node.key]
        if record.close is None:
            out += record.tokens
            if node.children:  # a projection should give it no text: keep what it got after it
                out.append(_text(flatten(node.children).text))
        else:
            out += [*record.tokens, *_tokens(node.children, kept), record.close]
    return out


class _Reader:
    """Walks a token stream into units, the places they are written back to and the tokens inlines stand for."""

    def __init__(self, name: str) -> None:
        self.name = name
        self.units: list[Unit] = []
        self.places: list[_Inline | _Alt] = []
        self.kept: list[_Kept] = []

    def inline(self, token: Token) -> None:
        children = token.children or []
        root: list[str | Element] = []
        stack: list[tuple[list[str | Element], int | None]] = [(root, None)]  # open elements: content, key
        i = 0
        while i < len(children):
            child = children[i]
            content = stack[-1][0]
            if child.type == "text":
                content.append(child.content)
            elif child.type == "softbreak":
                content.append(" ")
            elif child.type == "link_open" and child.info == "auto":  # the URL is its text: keep it all
                end = next((j for j in range(i, len(children)) if children[j].type == "link_close"), i)
                content.append(self.keep(children[i : end + 1]))
                i = end
            elif child.nesting == 1:
                if len(stack) > MAX_NESTING:
                    raise DocumentError(f"{self.name}: inline markup nested more than {MAX_NESTING} deep")
                element = self.keep([child])
                content.append(element)
                stack.append((element.children, element.key))
            elif child.nesting == -1:
                key = stack.pop()[1] if len(stack) > 1 else None
                if key is not None:
                    self.kept[key].close = child
            else:
                content.append(self.keep([child]))
                if child.type == "image":
                    self.alt(child)
            i += 1
        unit, spacing = read_spaced(root, lambda key: self.kept[key].tokens[0].type == "hardbreak")
        if unit.text.strip():
            self.units.append(unit)
            self.places.append(_Inline(token, spacing))

    def alt(self, image: Token) -> None:
        """An image's description as a unit, when it is plain text."""
        parts = image.children or []
        if all(part.type in ("text", "softbreak") for part in parts):
            text = "".join(part.content if part.type == "text" else " " for part in parts)
            if text.strip():
                self.units.append(Unit(text))
                self.places.append(_Alt(image))

    def keep(self, tokens: list[Token]) -> Element:
        self.kept.append(_Kept(tokens))
        return Element(len(self.kept) - 1, [])


@dataclass
class MarkdownDocument:
    """A parsed Markdown file: its token stream, and the places its units are written back to."""

    units: list[Unit]
    places: list[_Inline | _Alt]
    kept: list[_Kept]
    tokens: list[Token]
    env: dict[str, Any]
    options: Mapping[str, Any]
    front_matter: str
    bom: bool
    crlf: bool
    hard_breaks: bool = False

    def write(self, translated: list[Unit]) -> bytes:
        if len(translated) != len(self.places):
            raise ValueError(f"the Markdown has {len(self.places)} units, got {len(translated)} translated")
        for place, unit in zip(self.places, translated, strict=True):
            place.write(unit, self.kept)
        text = MDRenderer().render(self.tokens, self.options, self.env)
        if self.crlf:
            text = text.replace("\n", "\r\n")
        return ("\ufeff" if self.bom else "").encode("utf-8") + (self.front_matter + text).encode("utf-8")


def read(data: bytes, name: str) -> MarkdownDocument:
    """The Markdown file ``data`` (called ``name`` in errors): one unit per paragraph, heading or table cell."""
    text, bom = decode_utf8(data, name)
    front = FRONT_MATTER.match(text)
    front_matter = front.group(0) if front is not None else ""
    text = text[len(front_matter) :]
    parser = _parser()
    env: dict[str, Any] = {}
    tokens = parser.parse(text, env)  # any text is Markdown, but markdown-it skips what is nested too deeply
    if any(t.nesting == 1 and t.level >= MAX_NESTING - 1 for t in tokens if t.type in CONTAINERS):
        raise DocumentError(f"{name}: block quotes and lists nested more than {MAX_NESTING} levels deep")
    reader = _Reader(name)
    for token in tokens:
        if token.type == "inline":
            reader.inline(token)
    return MarkdownDocument(reader.units, reader.places, reader.kept, tokens, env, parser.options, front_matter, bom,
                            "\r\n" in text)


FORMAT = Format("markdown", (".md", ".markdown"), "text/markdown", read)
