"""TEMPORARY stand-ins for APIs that other branches are adding; delete this module once they are merged.

- ``read_stream``: ``mt.data.read_stream`` (bytes in, lines out, invalid UTF-8 named by line number).
- ``resolve_device``: ``mt.device.resolve_device`` (a UserError when the device is not there).
"""

from __future__ import annotations

import codecs
from collections.abc import Iterator
from typing import BinaryIO

import torch

from mt.errors import UserError

try:
    from mt.data import read_stream
except ImportError:

    def read_stream(stream: BinaryIO, name: str = "<stdin>") -> Iterator[str]:
        """Lines of a binary stream decoded one by one: BOM and ``\\r\\n`` stripped, split on ``\\n`` only."""
        from mt.data import DataError

        for lineno, raw in enumerate(stream, start=1):
            if lineno == 1:
                raw = raw.removeprefix(codecs.BOM_UTF8)
            try:
                line = raw.decode("utf-8")
            except UnicodeDecodeError as e:
                raise DataError(f"{name}:{lineno}: invalid UTF-8 at byte {e.start + 1}: {raw[:60]!r}") from None
            yield line.removesuffix("\n").removesuffix("\r")


try:
    from mt.device import resolve_device
except ImportError:

    def resolve_device(name: str) -> torch.device:
        """``auto`` -> cuda if available, else cpu; a UserError for a device this machine does not have."""
        if name == "auto":
            return torch.device("cuda" if torch.cuda.is_available() else "cpu")
        try:
            device = torch.device(name)
        except RuntimeError:
            raise UserError(f"unknown device '{name}': use cpu, cuda, cuda:N or auto") from None
        if device.type == "cuda" and not torch.cuda.is_available():
            raise UserError(f"device '{name}' is not available: this machine has no usable CUDA GPU; use cpu")
        if device.type == "cuda" and device.index is not None and device.index >= torch.cuda.device_count():
            raise UserError(f"device '{name}' is not available: {torch.cuda.device_count()} CUDA device(s)")
        return device

