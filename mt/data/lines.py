"""Text files and streams as lines, the same way everywhere (training data, ``--input``, ``--src``, stdin).

Bytes are split on ``\\n`` only and each line is decoded as strict UTF-8, so the line count is always
``wc -l`` (+1 for a last line without a newline) and line ``n`` of a source file is line ``n`` of its
translation. Decoding the whole text and splitting it would not do: ``str.splitlines`` also breaks at
``\\x0b``, ``\\x0c``, ``\\x1c``-``\\x1e``, ``\\x85``, U+2028 and U+2029, and text-mode files break at a lone
``\\r``. A UTF-8 BOM at the start of the input and the ``\\r`` of a CRLF line end are removed; everything
else inside a line (NUL, zero-width and combining characters, other control characters) is kept as is.
Every failure is a ``DataError`` naming the file, and the line where there is one.
"""

from __future__ import annotations

import codecs
import gzip
import zlib
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import BinaryIO

from mt.data.errors import DataError

_READ_ERRORS = (OSError, EOFError, zlib.error)  # what gzip and the OS raise on a corrupt or failing file


@contextmanager
def open_binary(path: str | Path) -> Iterator[BinaryIO]:
    """``path`` opened for reading bytes, gunzipped on the fly when it ends in ``.gz``.

    ``DataError`` when it is missing, a directory or unreadable.
    """
    path = Path(path)
    if path.is_dir():
        raise DataError(f"{path} is a directory, expected a text file")
    try:
        f = open(path, "rb")  # noqa: SIM115 - closed below
    except FileNotFoundError:
        raise DataError(f"{path}: no such file") from None
    except OSError as e:
        raise DataError(f"{path}: cannot open ({e.strerror or e})") from None
    try:
        if path.suffix == ".gz":
            with gzip.GzipFile(fileobj=f, mode="rb") as gz:
                yield gz  # type: ignore[misc]
        else:
            yield f
    finally:
        f.close()


def _read_error(name: str, error: BaseException, lines_read: int) -> DataError:
    if name.endswith(".gz"):
        what, hint = "corrupt or truncated gzip file", "; check it with gzip -t, re-download or recompress it"
    else:
        what, hint = "read error", ""
    reason = getattr(error, "strerror", None) or str(error) or type(error).__name__
    return DataError(f"{name}: {what} after line {lines_read} ({reason}){hint}")


def _decode(raw: bytes, name: str, lineno: int) -> str:
    """One line's bytes without its ``\\n`` / ``\\r\\n``, as text."""
    if raw.endswith(b"\n"):
        raw = raw[:-2] if raw.endswith(b"\r\n") else raw[:-1]
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError as e:
        column = len(raw[: e.start].decode("utf-8")) + 1  # characters, 1-based; the prefix is valid UTF-8
        raise DataError(
            f"{name}:{lineno}: invalid UTF-8 (byte 0x{raw[e.start]:02x} at column {column}); "
            "convert the file to UTF-8 (e.g. iconv -f latin1 -t utf-8)"
        ) from None


def read_stream(stream: BinaryIO | Iterable[bytes], name: str = "<stdin>") -> Iterator[str]:
    """Lines of a binary stream (e.g. ``sys.stdin.buffer``) as text without line ends, lazily.

    Split on ``b"\\n"`` only, a BOM at the start and the ``\\r`` of ``\\r\\n`` removed, each line strict
    UTF-8 (``DataError`` ``"<name>:<line>: invalid UTF-8 (byte 0x.. at column ..)"``), anything else kept.
    ``name`` is what errors call the stream. Yields each line as it arrives (an interactive terminal).
    """
    lineno = 0
    try:
        for lineno, raw in enumerate(stream, start=1):  # binary iteration splits on b"\n" only
            if lineno == 1 and raw.startswith(codecs.BOM_UTF8):
                raw = raw[len(codecs.BOM_UTF8) :]
            yield _decode(raw, name, lineno)
    except _READ_ERRORS as e:
        raise _read_error(name, e, lineno) from None  # lineno: the lines read whole


def read_lines(path: str | Path) -> Iterator[str]:
    """Lines of a plain or gzip'd (``.gz``) UTF-8 file, lazily, exactly as ``read_stream`` splits them.

    So the count is ``wc -l`` (+1 for a last line without newline) even with U+2028, ``\\x0c`` or a lone
    ``\\r`` inside a line (``str.splitlines`` would break there). ``DataError`` naming the file (and line)
    when it is missing, a directory, unreadable, corrupt gzip or not UTF-8.
    """
    with open_binary(path) as f:
        yield from read_stream(f, str(path))


def count_lines(path: str | Path) -> int:
    """The number of lines ``read_lines`` yields, counted cheaply (bytes in 1 MiB chunks, no decoding)."""
    count, last = 0, b"\n"
    with open_binary(path) as f:
        try:
            while chunk := f.read1(1 << 20):  # read1: what is decoded so far counts before an error
                count += chunk.count(b"\n")
                last = chunk[-1:]
        except _READ_ERRORS as e:
            raise _read_error(str(path), e, count) from None
    return count + (last != b"\n")
