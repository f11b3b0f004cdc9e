"""Checks on an uploaded office file (.docx, .pptx, .odt: zip archives) before a library opens it.

Every reader calls ``check_archive`` first: a file that is not a zip (corrupt, or an OLE compound file, which is
how Office saves an encrypted document) or that would unpack to too much (a zip bomb) is a ``DocumentError``
naming the file. The check reads only the zip's central directory (each member's declared sizes) and
decompresses nothing; Python's ``zipfile`` never inflates a member past its declared size, so the declared
sizes bound what the libraries can unpack later. Inside ``library_errors``, anything a library raises while
reading (a missing part, broken XML) becomes the same kind of one-line ``DocumentError`` (``library_error``).
"""

from __future__ import annotations

import zipfile
from collections.abc import Iterator
from contextlib import contextmanager
from io import BytesIO
from pathlib import PurePath

from mt.document.errors import DocumentError

MAX_UNPACKED = 256 * 1024 * 1024  # bytes all members may unpack to together
MAX_RATIO = 200  # a member's uncompressed size over its compressed size (deflate tops out near 1,000)
RATIO_FLOOR = 1024 * 1024  # members smaller than this are not held to MAX_RATIO (small repetitive XML is fine)
OLE_MAGIC = bytes.fromhex("d0cf11e0a1b11ae1")  # an OLE compound file: encrypted Office files, old .doc/.ppt


def check_archive(data: bytes, name: str, max_unpacked: int = MAX_UNPACKED, *, kind: str | None = None) -> None:
    """DocumentError unless ``data`` is a zip archive that unpacks to at most ``max_unpacked`` bytes, none of its
    members compressed more than ``MAX_RATIO`` times. ``kind`` names the format in messages (``docx``; default:
    the extension of ``name``)."""
    what = f".{kind}" if kind is not None else PurePath(name).suffix.lower() or "office"
    if data.startswith(OLE_MAGIC):
        raise DocumentError(
            f"{name}: encrypted (password-protected) files cannot be translated (or this is an old binary Office "
            f"file, not {what}): save it as {what} without a password"
        )
    try:
        with zipfile.ZipFile(BytesIO(data)) as archive:
            members = archive.infolist()
    except (zipfile.BadZipFile, zipfile.LargeZipFile, OSError, ValueError, EOFError):
        raise DocumentError(f"{name}: not a valid {what} file (corrupt zip)") from None
    total = 0
    for member in members:
        total += member.file_size
        if total > max_unpacked:
            raise DocumentError(
                f"{name}: unpacks to more than {max_unpacked / 2**20:g} MiB (a zip bomb?); it cannot be translated"
            )
        ratio = member.file_size // max(member.compress_size, 1)
        if member.file_size > RATIO_FLOOR and ratio > MAX_RATIO:
            raise DocumentError(
                f"{name}: its member {member.filename!r} is compressed {ratio} times (more than {MAX_RATIO}: a zip "
                "bomb?); it cannot be translated"
            )


def library_error(name: str, kind: str, error: Exception) -> DocumentError:
    """The ``DocumentError`` for an exception a reading library raised on ``name`` (one line, its short reason)."""
    reason = str(error).strip().splitlines()[0] if str(error).strip() else ""
    reason = f"{type(error).__name__}: {reason}" if reason else type(error).__name__
    if len(reason) > 200:
        reason = reason[:197] + "..."
    return DocumentError(f"{name}: not a valid .{kind} file: {reason}")


@contextmanager
def library_errors(name: str, kind: str) -> Iterator[None]:
    """Reading ``name`` with a library (python-docx, python-pptx, odfpy, lxml, zipfile): whatever it raises on a
    broken file, the user's file, is the ``DocumentError`` of ``library_error``."""
    try:
        yield
    except DocumentError:
        raise
    except Exception as error:
        raise library_error(name, kind, error) from None
