"""Words a line break or a tab stands between, kept apart in a unit's text.

A line break or tab is a zero-width inline element: written back as it was, it has no text. But the words on
either side must not run together in the text the model reads ("first<br/>second" is not "firstsecond"), so
a reader ``pad``s the tree it builds: a space goes after each such element that stands directly between two
words, and the element's key is remembered. The writer ``unpad``s the translated tree with those keys: one
whitespace character next to each padded element (after it, else before it) is dropped, so a file written
back untranslated is the file read, and a translated one does not gain a space at every break.

An element of zero width that stood between spaces (inline code, an image: "Run <code>x</code> now") should
stay between words. A projection may put it against a word ("Lancez<code>x</code> maintenant"), so a reader
notes the keys of those ``spaced`` in the source, and the writer ``respace``s the translated tree: such an
element left with a space on one side only gets one on the other. ``read_spaced`` and ``Spacing.tree`` do
both for a format that reads and writes its units this way (HTML, Markdown).
"""

from __future__ import annotations

from bisect import bisect_left
from collections.abc import Callable
from dataclasses import dataclass

from mt.document.model import Element, Unit, flatten, nest

Tree = list[str | Element]


def _leaves(tree: Tree) -> list[tuple[Tree, int]]:
    """Every node of ``tree`` as (its list, its index), in document order (an element before its content)."""
    out: list[tuple[Tree, int]] = []

    def walk(nodes: Tree) -> None:
        for i, node in enumerate(nodes):
            out.append((nodes, i))
            if isinstance(node, Element):
                walk(node.children)

    walk(tree)
    return out


def pad(tree: Tree, spacing: Callable[[int], bool]) -> set[int]:
    """Put a space after each element ``spacing(key)`` picks that stands between two non-space characters;
    the padded elements' keys."""
    leaves = _leaves(tree)
    before: list[str] = []  # the last character of text before each node
    last = ""
    for nodes, i in leaves:
        before.append(last)
        node = nodes[i]
        if isinstance(node, str) and node:
            last = node[-1]
    padded: set[int] = set()
    after = ""  # the first character of text after the node, as padded so far (going backwards)
    for k in reversed(range(len(leaves))):
        nodes, i = leaves[k]
        node = nodes[i]
        if isinstance(node, str):
            after = node[:1] or after
        elif spacing(node.key) and before[k] and after and not before[k].isspace() and not after.isspace():
            nodes.insert(i + 1, " ")  # later nodes of this list are already done: their indices may shift
            padded.add(node.key)
            after = " "
    return padded


def unpad(tree: Tree, padded: set[int]) -> None:
    """Drop one whitespace character next to each padded element of a (translated) ``tree``: the first of the
    text after it, else the last of the text before it."""
    if not padded:
        return
    leaves = _leaves(tree)
    texts = [k for k, (nodes, i) in enumerate(leaves) if isinstance(nodes[i], str)]

    def text(t: int) -> str:
        nodes, i = leaves[t]
        return nodes[i]  # type: ignore[return-value]

    def cut(t: int, start: int, end: int | None) -> None:
        nodes, i = leaves[t]
        nodes[i] = text(t)[start:end]

    for k, (nodes, i) in enumerate(leaves):
        node = nodes[i]
        if not (isinstance(node, Element) and node.key in padded):
            continue
        at = bisect_left(texts, k)
        after = next((texts[m] for m in range(at, len(texts)) if text(texts[m])), None)
        before = next((texts[m] for m in range(at - 1, -1, -1) if text(texts[m])), None)
        if after is not None and text(after)[0].isspace():
            cut(after, 1, None)
        elif before is not None and text(before)[-1].isspace():
            cut(before, 0, -1)


def spaced(unit: Unit) -> set[int]:
    """Keys of the zero-width elements with whitespace right before and right after them in ``unit``."""
    text = unit.text
    return {inline.key for inline in unit.inlines
            if inline.start == inline.end and 0 < inline.start < len(text)
            and text[inline.start - 1].isspace() and text[inline.start].isspace()}


def respace(tree: Tree, keys: set[int]) -> None:
    """Give each element of ``keys`` (``spaced`` in the source) back the space a translation left on one side
    only: a projection puts a zero-width element against a word ("Run<code>x</code> now"), and inline code
    or an image between words should stay between words. Text on neither side, or spaces on both: left."""
    found = _leaves(tree)
    after = [""] * (len(found) + 1)  # the first character of text from each node on
    for k in reversed(range(len(found))):
        nodes, i = found[k]
        node = nodes[i]
        after[k] = node[0] if isinstance(node, str) and node else after[k + 1]
    last = ""  # the last character of text so far, spaces to be inserted included
    inserts: list[tuple[Tree, int]] = []
    for k, (nodes, i) in enumerate(found):
        node = nodes[i]
        if isinstance(node, str):
            last = node[-1:] or last
        elif node.key in keys and last and after[k + 1] and last.isspace() != after[k + 1].isspace():
            inserts.append((nodes, i + 1 if last.isspace() else i))
            last = " "
    for nodes, i in reversed(inserts):  # later places first: the earlier indices stay right
        nodes.insert(i, " ")


@dataclass(frozen=True)
class Spacing:
    """What a reader notes about a unit's spaces for its writer: the keys of the breaks it padded and of the
    zero-width elements that stood between spaces."""

    padded: set[int]
    spaced: set[int]

    def tree(self, translated: Unit) -> Tree:
        """The unit's translation as a tree to write back: the padding taken out, the spaces given back."""
        tree = nest(translated.text, translated.inlines)
        unpad(tree, self.padded)
        respace(tree, self.spaced)
        return tree


def read_spaced(tree: Tree, spacing: Callable[[int], bool]) -> tuple[Unit, Spacing]:
    """The unit ``tree`` stands for, ``pad``ded after the breaks ``spacing(key)`` picks, and its ``Spacing``."""
    padded = pad(tree, spacing)
    unit = flatten(tree)
    return unit, Spacing(padded, spaced(unit))
