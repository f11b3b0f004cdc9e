"""The one base class of every error a user can cause and fix (bad data, config, checkpoint, flag, device).

Entry points catch ``UserError`` and print one line, ``mt-<cmd>: error: <message>``, without a traceback;
anything else is a bug and keeps its traceback. Messages say what is wrong, where (file and line, or
``key=value``) and, where it helps, what to do.
"""

from __future__ import annotations


class UserError(Exception):
    """An expected error caused by the input; ``str(error)`` is the whole message shown to the user."""
