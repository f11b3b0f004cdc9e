"""Fake translations for the document format tests: each keeps a unit's inline keys and nesting."""

from __future__ import annotations

import re

from mt.document.model import Element, Unit, flatten, nest


def upper(units: list[Unit]) -> list[Unit]:
    """Each unit uppercased, every inline where it was."""
    return [Unit(unit.text.upper(), unit.inlines) for unit in units]


def reverse(units: list[Unit]) -> list[Unit]:
    """Each unit's words in reverse order, every element around the same words (its keys and nesting kept)."""

    def flip(nodes: list[str | Element]) -> list[str | Element]:
        return [
            "".join(reversed(re.findall(r"\s+|\S+", node)))
            if isinstance(node, str)
            else Element(node.key, flip(node.children))
            for node in reversed(nodes)
        ]

    return [flatten(flip(nest(unit.text, unit.inlines))) for unit in units]
