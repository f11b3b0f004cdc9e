"""One reader per local file format (parallel files, TSV, JSONL): pairs out, or a ``DataError`` naming
``file:line``. Line counts of parallel files are compared before any text is read."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from mt.data.errors import DataError
from mt.data.lines import count_lines, read_lines


def _count_rest(lines: Iterator[str]) -> int:
    return sum(1 for _ in lines)


def _lines(n: int) -> str:
    return f"{n} line" if n == 1 else f"{n} lines"


def check_line_counts(src_path: str | Path, tgt_path: str | Path) -> None:
    """``DataError`` naming both files and counts unless they have as many lines (cheap: no decoding)."""
    n_src, n_tgt = count_lines(src_path), count_lines(tgt_path)
    if n_src != n_tgt:
        raise DataError(
            f"line counts differ: {src_path} has {_lines(n_src)}, {tgt_path} has {_lines(n_tgt)}; "
            "line n of one file must be the translation of line n of the other"
        )


def parallel_pairs(src_path: Path, tgt_path: Path) -> Iterator[dict[str, str]]:
    src_lines, tgt_lines = read_lines(src_path), read_lines(tgt_path)
    n = 0
    for n, src in enumerate(src_lines, start=1):  # noqa: B007 - n is the count afterwards
        tgt = next(tgt_lines, None)
        if tgt is None:
            raise DataError(
                f"line counts differ: {src_path} has {_lines(n + _count_rest(src_lines))}, "
                f"{tgt_path} has {_lines(n - 1)}"
            )
        yield {"src": src, "tgt": tgt}
    extra = _count_rest(tgt_lines)
    if extra:
        raise DataError(f"line counts differ: {src_path} has {_lines(n)}, {tgt_path} has {_lines(n + extra)}")


def tsv_pairs(path: Path) -> Iterator[dict[str, str]]:
    for lineno, line in enumerate(read_lines(path), start=1):
        fields = line.split("\t")
        if len(fields) != 2:
            raise DataError(f"{path}:{lineno}: expected 2 tab-separated fields (src<TAB>tgt), got {len(fields)}")
        yield {"src": fields[0], "tgt": fields[1]}


def pick_languages(row: dict[str, Any], src_lang: str, tgt_lang: str, where: str) -> dict[str, str]:
    """``src``/``tgt`` from ``{src_lang: .., tgt_lang: ..}`` or ``{"translation": {...}}``."""
    pair = row.get("translation", row) if isinstance(row, dict) else None
    if not isinstance(pair, dict) or not isinstance(pair.get(src_lang), str) or not isinstance(pair.get(tgt_lang), str):
        raise DataError(
            f"{where}: expected string fields '{src_lang}' and '{tgt_lang}' "
            f"(optionally under 'translation'), got {str(row)[:80]}"
        )
    return {"src": pair[src_lang], "tgt": pair[tgt_lang]}


def jsonl_pairs(path: Path, src_lang: str, tgt_lang: str) -> Iterator[dict[str, str]]:
    for lineno, line in enumerate(read_lines(path), start=1):
        if not line.strip():
            continue
        try:
            row = json.loads(line)
        except json.JSONDecodeError as e:
            raise DataError(f"{path}:{lineno}: invalid JSON ({e.msg} at column {e.colno})") from None
        yield pick_languages(row, src_lang, tgt_lang, f"{path}:{lineno}")
