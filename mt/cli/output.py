"""Output paths of the commands: checked before any work starts, written whole or not at all.

``check_output_file`` / ``check_output_dir`` fail fast, with the flag and the path, before a model is
loaded. ``atomic_output`` writes to a temporary file beside the target and renames it over the target
at the end, so a failed or interrupted command leaves neither an empty nor a half-written file, and an
older file of that name stays as it was.
"""

from __future__ import annotations

import contextlib
import os
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import BinaryIO, TextIO

from mt.errors import UserError


def _nearest_existing(path: Path) -> Path:
    path = path.absolute()
    while not path.exists() and path != path.parent:
        path = path.parent
    return path


def _check_writable_dir(directory: Path, flag: str, target: Path) -> None:
    if not directory.is_dir():
        raise UserError(f"cannot write {flag} {target}: {directory} is not a directory")
    if not os.access(directory, os.W_OK | os.X_OK):
        raise UserError(f"cannot write {flag} {target}: no permission to write in {directory}")


def check_output_file(path: Path, flag: str) -> None:
    """``path`` can be written as a file: not a directory, and its directory exists and is writable."""
    if path.is_dir():
        raise UserError(f"{flag} {path} is a directory; give a file name")
    if path.exists() and not path.is_file():
        return  # /dev/stdout, a FIFO: written as it is
    parent = path.absolute().parent
    if not parent.exists():
        raise UserError(f"cannot write {flag} {path}: the directory {parent} does not exist")
    _check_writable_dir(parent, flag, path)


def check_output_dir(path: Path, flag: str) -> None:
    """``path`` is a writable directory, or can be created (its nearest existing ancestor is a writable dir)."""
    if path.exists() and not path.is_dir():
        raise UserError(f"{flag} {path} exists and is not a directory")
    _check_writable_dir(_nearest_existing(path), flag, path)


def check_input_file(path: Path, flag: str) -> None:
    """``path`` is an existing file (not a directory)."""
    if path.is_dir():
        raise UserError(f"{flag} {path} is a directory; give a file")
    if not path.exists():
        raise UserError(f"{flag} {path}: no such file")


def _new_file_mode() -> int:
    umask = os.umask(0)
    os.umask(umask)
    return 0o666 & ~umask


@contextlib.contextmanager
def atomic_output(path: Path | None, binary: bool = False) -> Iterator[TextIO | BinaryIO]:
    """A text stream (``binary``: a bytes stream) for ``path`` (stdout for None) that replaces ``path`` only
    if the block succeeds.

    A path that exists and is not a regular file (``/dev/stdout``, a FIFO) is written directly: renaming
    over it would replace the device. Lines are written with ``\\n`` only, on every platform.
    """
    opening = {"mode": "wb"} if binary else {"mode": "w", "encoding": "utf-8", "newline": "\n"}
    if path is None:
        yield sys.stdout.buffer if binary else sys.stdout
        return
    if path.exists() and not path.is_file():
        with path.open(**opening) as f:
            yield f
        return
    mode = path.stat().st_mode & 0o777 if path.exists() else _new_file_mode()
    fd, tmp_name = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.absolute().parent)
    tmp = Path(tmp_name)
    try:
        with os.fdopen(fd, **opening) as f:
            yield f
        os.chmod(tmp, mode)
        os.replace(tmp, path)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise


@contextlib.contextmanager
def atomic_binary_output(path: Path | None) -> Iterator[BinaryIO]:
    """``atomic_output`` for bytes (a translated document)."""
    with atomic_output(path, binary=True) as out:
        yield out
