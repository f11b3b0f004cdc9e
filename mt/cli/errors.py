"""The one error path of every entry point: expected errors become ``mt-<cmd>: error: <message>``.

``run_command(prog, command)`` runs a command and catches what the user can cause and fix:
``UserError`` (bad data, config, checkpoint, flag, device), ``OSError`` (a missing or unwritable path,
a directory where a file is expected; the message names the path) and Ctrl-C. Each is printed as one
line on stderr, without a traceback, and turned into an exit status: 2 for usage errors (as argparse
does), 130 for Ctrl-C, 1 otherwise; a closed stdout pipe ends quietly with 141. Anything else is a bug
and keeps its traceback. ``--debug`` or ``MT_DEBUG=1`` prints the traceback of expected errors too.
"""

from __future__ import annotations

import os
import sys
import traceback
from collections.abc import Callable

from mt.errors import UserError

DEBUG_ENV = "MT_DEBUG"
EXIT_ERROR, EXIT_USAGE, EXIT_INTERRUPTED, EXIT_BROKEN_PIPE = 1, 2, 130, 141


class UsageError(UserError):
    """A bad command line found after parsing (a flag value, a combination of flags, a Hydra override)."""


def debug_enabled(flag: bool = False) -> bool:
    """``--debug`` was given or ``MT_DEBUG`` is set to anything but ``""`` / ``"0"``."""
    return flag or os.environ.get(DEBUG_ENV, "") not in ("", "0")


def pop_debug_flag(argv: list[str]) -> tuple[list[str], bool]:
    """``argv`` without ``--debug`` (for commands whose parser is not ours, like Hydra's), and whether it was there."""
    rest = [arg for arg in argv if arg != "--debug"]
    return rest, len(rest) != len(argv)


def describe(error: BaseException) -> str:
    """The message shown for an expected error: a UserError's own text; for an OSError the path and the reason."""
    if isinstance(error, OSError) and not isinstance(error, UserError) and error.strerror:
        paths = [str(p) for p in (error.filename, error.filename2) if p is not None]
        return ": ".join([" -> ".join(paths), error.strerror] if paths else [error.strerror])
    return str(error) or type(error).__name__


def exit_status(error: BaseException) -> int:
    return EXIT_USAGE if isinstance(error, UsageError) else EXIT_ERROR


def report(prog: str, error: BaseException, debug: bool = False) -> int:
    """Print ``error`` as ``PROG: error: MESSAGE`` (its traceback first when debugging); return the exit status."""
    if debug_enabled(debug):
        traceback.print_exception(error, file=sys.stderr)
    print(f"{prog}: error: {describe(error)}", file=sys.stderr, flush=True)
    return exit_status(error)


def run_command(prog: str, command: Callable[[], int | None], debug: bool = False) -> int:
    """Run ``command`` and return its exit status; expected errors are reported on one line (see module doc)."""
    try:
        return command() or 0
    except BrokenPipeError:  # the reader went away (``mt-translate ... | head``): stop quietly, as shells expect
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())  # no second error when stdout is flushed
        return EXIT_BROKEN_PIPE
    except KeyboardInterrupt as e:
        if debug_enabled(debug):
            traceback.print_exception(e, file=sys.stderr)
        print(f"\n{prog}: interrupted", file=sys.stderr, flush=True)
        return EXIT_INTERRUPTED
    except (UserError, OSError) as e:
        return report(prog, e, debug)
