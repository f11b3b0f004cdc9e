"""Request limits and API keys: each refusal is an ``ApiError`` with one clear line, before anything is queued."""

from __future__ import annotations

import hmac
from collections.abc import Sequence
from pathlib import Path

from mt.errors import UserError
from mt.serve.engine import Engine
from mt.serve.problems import ApiError, bad_request


def load_api_keys(path: Path) -> frozenset[str]:
    """One key a line (blank lines and ``#`` comments skipped); an empty file is an error, not an open server."""
    keys = frozenset(
        line.strip() for line in path.read_text(encoding="utf-8").splitlines()
        if line.strip() and not line.lstrip().startswith("#")
    )
    if not keys:
        raise UserError(f"--api-keys {path}: no key in the file (one key a line)")
    return keys


def check_api_key(given: object, keys: frozenset[str]) -> None:
    """403 unless ``given`` is one of ``keys`` (no keys: open). Every key is compared, each in constant time."""
    if not keys:
        return
    candidate = given.encode("utf-8", "surrogatepass") if isinstance(given, str) else b""
    matched = False
    for key in keys:
        matched |= hmac.compare_digest(candidate, key.encode("utf-8"))
    if not matched:
        raise ApiError(403, "Invalid API key")


def split_lines(text: str) -> list[str]:
    """One sentence a line, as mt-translate reads files: split on ``\\n`` only, a trailing ``\\r`` dropped."""
    return [line.removesuffix("\r") for line in text.split("\n")]


def check_text(text: str, what: str) -> None:
    """400 for text that is not valid Unicode (a lone surrogate from a JSON ``\\ud800`` escape)."""
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        raise bad_request(f"{what} is not valid Unicode (a lone surrogate)") from None


def check_sentence_count(count: int, max_lines: int) -> None:
    """400 for more sentences (lines, when they are not split) in one request than ``--max-lines``."""
    if count > max_lines:
        raise bad_request(f"{count} sentences in one request, more than --max-lines {max_lines}")


def line_costs(engine: Engine, lines: Sequence[str], rows: int, target: str | None = None) -> list[int]:
    """Each line's batch cost (pieces with ``target``'s tag, truncated to the model's limit, + EOS) x ``rows``;
    0 for an empty line.

    With ``on_too_long=reject`` a line over the limit is a 400 naming it, as mt-translate names the file line.
    """
    limit = engine.max_src_len
    costs = []
    for number, line in enumerate(lines, start=1):
        pieces = engine.count_pieces(line, target)
        if limit is not None and pieces > limit:
            if engine.on_too_long == "reject":
                raise bad_request(
                    f"line {number}: {pieces} source pieces, more than the model's {limit} (--on-too-long reject); "
                    "shorten the line"
                )
            pieces = limit
        costs.append((pieces + 1) * rows if pieces else 0)
    return costs
