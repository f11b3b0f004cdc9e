"""``DocumentError``: a document mt cannot read (corrupt, encrypted, too large, a format it does not know)."""

from __future__ import annotations

from mt.errors import UserError


class DocumentError(UserError):
    """The message names the file (or the request's text) and what is wrong with it, on one line."""
