"""The error of bad input data or data settings."""

from __future__ import annotations

from mt.errors import UserError


class DataError(UserError, ValueError):
    """Bad input data or settings: the message names the file and line (``path:line:``), example or value.

    A ``UserError`` (entry points print it without a traceback) and, for older callers, a ``ValueError``.
    """
