"""Plain text: the whole file is one unit, and its line breaks end sentences.

The file must be UTF-8 (a byte order mark is accepted and written back). The unit's text is the file's text
exactly, every newline and blank line included: the sentence splitter keeps each separator, so the
translation comes back with the same lines and spacing between its sentences.
"""

from __future__ import annotations

import codecs
from dataclasses import dataclass

from mt.document.errors import DocumentError
from mt.document.formats import Format
from mt.document.model import Unit


@dataclass
class TextDocument:
    """A plain-text file read as one unit; ``bom`` whether it started with a UTF-8 byte order mark."""

    units: list[Unit]
    bom: bool
    hard_breaks: bool = True

    def write(self, translated: list[Unit]) -> bytes:
        if len(translated) != 1:
            raise ValueError(f"a text document has 1 unit, got {len(translated)} translated")
        data = translated[0].text.encode("utf-8")
        return codecs.BOM_UTF8 + data if self.bom else data


def decode_utf8(data: bytes, name: str) -> tuple[str, bool]:
    """``data`` as text and whether it started with a byte order mark; DocumentError at the first invalid byte."""
    bom = data.startswith(codecs.BOM_UTF8)
    body = data[len(codecs.BOM_UTF8) :] if bom else data
    try:
        return body.decode("utf-8"), bom
    except UnicodeDecodeError as error:
        offset = error.start + (len(codecs.BOM_UTF8) if bom else 0)
        raise DocumentError(
            f"{name}: not UTF-8 text (byte 0x{body[error.start]:02x} at offset {offset}); save it as UTF-8"
        ) from None


def read(data: bytes, name: str) -> TextDocument:
    """The file ``data`` (called ``name`` in errors) as one unit."""
    text, bom = decode_utf8(data, name)
    return TextDocument([Unit(text)], bom)


FORMAT = Format("text", (".txt",), "text/plain", read)
