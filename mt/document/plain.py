"""A string of plain text as a document: an API's ``q``, a line of mt-translate's input.

One unit without markup whose line breaks end sentences (``hard_breaks``); it writes its translation back
as UTF-8. (A ``.txt`` file is read by ``mt.document.formats.text``, which also keeps a BOM.)
"""

from __future__ import annotations

from dataclasses import dataclass

from mt.document.model import Unit


@dataclass
class TextDocument:
    """Plain text: ``units`` holds one unit per text given."""

    units: list[Unit]
    hard_breaks: bool = True

    def write(self, translated: list[Unit]) -> bytes:
        return "".join(unit.text for unit in translated).encode("utf-8")


def text_document(text: str) -> TextDocument:
    return TextDocument([Unit(text)])
