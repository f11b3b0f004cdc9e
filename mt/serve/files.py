"""``FileStore``: translated files waiting to be downloaded, for a while, under a bounded total size.

``POST /translate_file`` stores the translated file and answers a URL holding its token
(``secrets.token_urlsafe(32)``: 43 characters, 256 random bits, so a URL cannot be guessed);
``GET /download_file/<token>/<name>`` reads it back. The files live in a private directory (mode 0700,
``tempfile.mkdtemp``) made when the app starts and removed with everything in it when it stops. Each file is
kept for ``ttl_s`` seconds (``--file-ttl``), then removed: expired files are swept on every ``put`` and
``get``, and the rest at ``close``. Past ``max_bytes`` (``--max-stored-bytes``) in all, the oldest files are
removed first to make room. The routes call ``put`` and ``get`` in a thread (``asyncio.to_thread``), so
the index is guarded by a lock.
"""

from __future__ import annotations

import re
import secrets
import shutil
import tempfile
import threading
import time
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path, PurePosixPath, PureWindowsPath

MAX_NAME_CHARS = 100
UNSAFE = re.compile(r"[^\w.\- ]+")  # \w is Unicode: letters and digits of any script stay


class StoreFull(Exception):
    """One file larger than the whole store (``max_bytes``)."""


@dataclass(frozen=True)
class Stored:
    """A stored file: where it is, the name it downloads as, its media type, size and expiry (monotonic s)."""

    path: Path
    name: str
    media_type: str
    size: int
    expires: float


def download_name(uploaded: str, target: str, extension: str) -> str:
    """``<name>.<target><extension>`` for the upload ``uploaded`` (``report.docx`` into de: ``report.de.docx``):
    its last path part only, characters other than letters, digits, ``.-_`` and spaces as ``_``."""
    base = PureWindowsPath(PurePosixPath(uploaded).name).name  # a client may send a path of either kind
    stem = base[: -len(extension)] if base.lower().endswith(extension) else base
    safe = UNSAFE.sub("_", stem).strip(" .")[:MAX_NAME_CHARS] or "file"
    return f"{safe}.{UNSAFE.sub('_', target)}{extension}"


class FileStore:
    """Translated files by token (see the module docstring); ``open`` before use, ``close`` at shutdown."""

    def __init__(self, ttl_s: float, max_bytes: int, clock: Callable[[], float] = time.monotonic) -> None:
        self.ttl_s, self.max_bytes, self.clock = ttl_s, max_bytes, clock
        self.directory: Path | None = None
        self.files: OrderedDict[str, Stored] = OrderedDict()  # oldest first
        self.lock = threading.Lock()

    @property
    def stored_bytes(self) -> int:
        return sum(f.size for f in self.files.values())

    def open(self) -> None:
        self.directory = Path(tempfile.mkdtemp(prefix="mt-serve-files-"))  # mode 0700: this user only

    def close(self) -> None:
        with self.lock:
            self.files.clear()
            if self.directory is not None:
                shutil.rmtree(self.directory, ignore_errors=True)
                self.directory = None

    def put(self, data: bytes, name: str, media_type: str) -> str:
        """Store ``data`` (downloaded as ``name``) and return its token; StoreFull if it alone is over the bound."""
        if len(data) > self.max_bytes:
            raise StoreFull(f"the translated file ({len(data)} bytes) is over --max-stored-bytes {self.max_bytes}")
        if self.directory is None:
            raise RuntimeError("the file store is not open")
        token = secrets.token_urlsafe(32)
        path = self.directory / token
        with self.lock:
            self._sweep()
            while self.files and self.stored_bytes + len(data) > self.max_bytes:
                self._remove(next(iter(self.files)))
            path.write_bytes(data)
            self.files[token] = Stored(path, name, media_type, len(data), self.clock() + self.ttl_s)
        return token

    def get(self, token: str, name: str) -> tuple[Stored, bytes] | None:
        """The file stored under ``token`` as ``name`` and its bytes; None if there is none (or it expired)."""
        with self.lock:
            self._sweep()
            found = self.files.get(token)
            if found is None or found.name != name:
                return None
            return found, found.path.read_bytes()

    def _sweep(self) -> None:
        now = self.clock()
        for token in [t for t, f in self.files.items() if f.expires <= now]:
            self._remove(token)

    def _remove(self, token: str) -> None:
        self.files.pop(token).path.unlink(missing_ok=True)
