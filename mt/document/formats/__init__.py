"""One reader and writer per document format, all speaking ``mt.document.model``.

A ``Format`` reads a file's bytes into a ``Document``: its ``units`` (the translatable text, with inline
elements) and whatever else the format keeps to write the file back (styles, structure, untranslated
parts). ``Document.write(translated)`` takes one translated ``Unit`` per unit, in order, with the same
inline keys and nesting, and returns the translated file's bytes. ``format_for(name)`` picks a format by
the file name's extension; an extension no format reads is a ``DocumentError`` naming the formats that are.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import PurePath
from typing import Protocol

from mt.document.errors import DocumentError
from mt.document.model import Unit


class Document(Protocol):
    """A read document: its units, and what its format needs to write it back."""

    units: list[Unit]
    hard_breaks: bool  # True: a line break in a unit's text ends a sentence (plain text); False: it is spacing

    def write(self, translated: list[Unit]) -> bytes: ...


@dataclass(frozen=True)
class Format:
    """A document format: its name, file extensions, media type and reader (``read(data, name)``, ``name`` the
    file's name for error messages)."""

    name: str
    extensions: tuple[str, ...]
    media_type: str
    read: Callable[[bytes, str], Document]


def formats() -> dict[str, Format]:
    """Every format by name (their libraries load when a format is first used)."""
    from mt.document.formats import docx, html, markdown, odt, pptx, srt, text

    found = [module.FORMAT for module in (text, html, markdown, srt, docx, odt, pptx)]
    return {f.name: f for f in found}


def extensions() -> list[str]:
    """Every extension a format reads, with its dot (``.docx``), in a stable order."""
    return [ext for f in formats().values() for ext in f.extensions]


def format_for(name: str) -> Format:
    """The format that reads the file ``name`` (by its extension, case-insensitive)."""
    suffix = PurePath(name).suffix.lower()
    for f in formats().values():
        if suffix in f.extensions:
            return f
    known = ", ".join(extensions())
    raise DocumentError(f"{name}: {suffix or 'no extension'} is not a format mt translates (it reads {known})")
