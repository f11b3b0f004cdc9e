"""The project speaks of itself only: no numbered work sittings, issue numbers or build-machine paths in tracked text.

Every file ``git ls-files`` lists is read (files with a NUL byte, i.e. binaries, are skipped) and each line is
matched against ``FORBIDDEN``; the failure names ``path:line: text`` for every hit. The patterns are assembled
from pieces so that this file's own source does not match them.
"""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
SESSION = "sess" + "ion"
# an absolute path that starts a token, not the tail of a URL or of a relative path
MACHINE_PATH = r"(?<![\w.:/~-])/(?:" + "|".join(["wo" + "rk/", "ro" + "ot/", "ho" + r"me/[\w.-]+/"]) + ")"
FORBIDDEN: dict[str, re.Pattern[str]] = {
    "a numbered sitting": re.compile(rf"\b{SESSION}s? [0-9]", re.IGNORECASE),
    "a sitting's work": re.compile(rf"\b{SESSION}s? [0-9]+'s|\bthis {SESSION}\b", re.IGNORECASE),
    "an issue number": re.compile(r"\bissue " + "#" + "[0-9]", re.IGNORECASE),
    "a path of the build machine": re.compile(MACHINE_PATH),
}


def hits(text: str) -> list[tuple[int, str, str]]:
    """(line number, what, line) for every line of ``text`` that a ``FORBIDDEN`` pattern matches."""
    return [(number, what, line.strip())
            for number, line in enumerate(text.splitlines(), start=1)
            for what, pattern in FORBIDDEN.items() if pattern.search(line)]


def tracked_text_files() -> list[Path]:
    """The repository's tracked files that are text (no NUL byte). Needs git: CI runs in a clone."""
    listed = subprocess.run(["git", "ls-files", "-z"], cwd=ROOT, capture_output=True, check=True).stdout
    paths = [ROOT / name for name in listed.decode().split("\0") if name]
    return [p for p in paths if p.is_file() and b"\0" not in p.read_bytes()]


@pytest.mark.parametrize("line", [
    f"measured in {SESSION} 7 (2026-12-01)",
    f"{SESSION.capitalize()} 5, fresh clone",
    f"fp32 with {SESSION} 6's code",
    f"Tried this {SESSION} and dropped",
    "ratios 0.95-1.16, issue " + "#14",
    "scripts in /" + "work/notes, not committed",
    "cd /" + "root/mt && make test",
    "see /" + "home/alice/mt/README.md",
])
def test_the_patterns_catch_self_reference(line):
    assert hits(line), line


@pytest.mark.parametrize("line", [
    '@pytest.fixture(scope="session")',
    "trains the demo once per test session",
    "the fairseq venv under ~/.cache/mt-peers",
    "https://example.org/" + "work/page and data/" + "work/x",
    "an issue tracker",
])
def test_the_patterns_leave_ordinary_text_alone(line):
    assert not hits(line), line


def test_tracked_text_speaks_of_the_project_only():
    files = tracked_text_files()
    assert any(p.name == "README.md" for p in files)  # the listing worked
    found = [f"{path.relative_to(ROOT)}:{number}: {line}  ({what})"
             for path in files
             for number, what, line in hits(path.read_text(encoding="utf-8", errors="replace"))]
    assert not found, "self-reference in tracked files:\n" + "\n".join(found)
