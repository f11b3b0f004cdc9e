"""Reading text as lines: split on b"\\n" only, strict UTF-8 with file:line errors, BOM and CRLF removed."""

from __future__ import annotations

import gzip
import io
import os
import subprocess
import threading
from pathlib import Path

import pytest

from mt.data import DataError, count_lines, read_lines, read_stream
from mt.errors import UserError

# characters str.splitlines() breaks at, NUL, zero-width and combining characters: all stay inside a line
ODD = "a\x0bb\x0cc\x1cd\x1de\x1ef\x85g\u2028h\u2029i\x00j\u200bk\u200dl\u0301\u0308m\rn"


def test_lines_split_on_newline_only_and_keep_everything_else(tmp_path: Path) -> None:
    text = f"{ODD}\n\nplain\n"
    path = tmp_path / "odd.txt"
    path.write_bytes(text.encode())
    assert len(text.splitlines()) > 3  # what the reader must not do
    assert list(read_lines(path)) == [ODD, "", "plain"]
    assert count_lines(path) == 3 == int(subprocess.run(["wc", "-l"], input=text.encode(), capture_output=True,
                                                        check=True).stdout)


def test_bom_crlf_and_a_last_line_without_newline(tmp_path: Path) -> None:
    path = tmp_path / "win.txt"
    path.write_bytes(b"\xef\xbb\xbfhello\r\nworld\r\n\xef\xbb\xbfkept\nlast")
    assert list(read_lines(path)) == ["hello", "world", "\ufeffkept", "last"]  # a BOM inside the file stays
    assert count_lines(path) == 4  # wc -l says 3: the last line has no newline
    empty = tmp_path / "empty.txt"
    empty.write_bytes(b"")
    assert list(read_lines(empty)) == [] and count_lines(empty) == 0


def test_gzip_file_reads_the_same(tmp_path: Path) -> None:
    data = f"\ufeffone\r\n{ODD}\n".encode()
    (tmp_path / "a.txt").write_bytes(data)
    (tmp_path / "a.txt.gz").write_bytes(gzip.compress(data))
    assert list(read_lines(tmp_path / "a.txt.gz")) == list(read_lines(tmp_path / "a.txt")) == ["one", ODD]
    assert count_lines(tmp_path / "a.txt.gz") == 2


def test_invalid_utf8_names_file_line_byte_and_column(tmp_path: Path) -> None:
    path = tmp_path / "latin1.txt"
    path.write_bytes("fine\nnaïve\n".encode() + "café au lait\n".encode("latin-1"))
    lines = read_lines(path)
    assert next(lines) == "fine" and next(lines) == "naïve"
    with pytest.raises(DataError, match=rf"^{path}:3: invalid UTF-8 \(byte 0xe9 at column 4\)") as err:
        next(lines)
    assert isinstance(err.value, UserError) and isinstance(err.value, ValueError)
    with pytest.raises(DataError, match=r"^x\.txt:1: invalid UTF-8 \(byte 0xc3 at column 3\)"):
        list(read_stream(io.BytesIO(b"ab\xc3"), name="x.txt"))  # a sequence cut short at the line end


def test_read_stream_is_lazy_and_names_stdin() -> None:
    stream = io.BytesIO("\ufeffone\r\ntwo\x85three\n".encode() + b"bad \xff\n")
    lines = read_stream(stream)
    assert next(lines) == "one" and next(lines) == "two\x85three"
    with pytest.raises(DataError, match=r"^<stdin>:3: invalid UTF-8 \(byte 0xff at column 5\)"):
        next(lines)
    assert list(read_stream([b"a\n", b"b"], name="piece")) == ["a", "b"]  # any iterable of byte lines


def test_missing_directory_and_unreadable_paths(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    with pytest.raises(DataError, match=rf"^{tmp_path / 'nope.txt'}: no such file"):
        list(read_lines(tmp_path / "nope.txt"))
    with pytest.raises(DataError, match=rf"^{tmp_path} is a directory, expected a text file"):
        count_lines(tmp_path)
    locked = tmp_path / "locked.txt"
    locked.write_text("x\n")

    def denied(path: object, mode: str = "r") -> None:
        raise PermissionError(13, "Permission denied", str(path))

    monkeypatch.setattr("mt.data.lines.open", denied, raising=False)  # the tests run as root: chmod won't do
    with pytest.raises(DataError, match=rf"^{locked}: cannot open \(Permission denied\)"):
        list(read_lines(locked))


@pytest.mark.parametrize(
    ("name", "payload", "some_lines_read"),
    [
        ("random.en.gz", bytes(range(256)) * 4, False),  # not gzip at all
        ("truncated.en.gz", gzip.compress(b"".join(b"line %d\n" % i for i in range(20000)))[:300], True),
    ],
)
def test_corrupt_gzip_names_the_file(tmp_path: Path, name: str, payload: bytes, some_lines_read: bool) -> None:
    path = tmp_path / name
    path.write_bytes(payload)
    messages = []
    for read in (lambda: list(read_lines(path)), lambda: count_lines(path)):
        with pytest.raises(DataError, match=rf"^{path}: corrupt or truncated gzip file after line (\d+) ") as err:
            read()
        assert "gzip -t" in str(err.value)
        messages.append(str(err.value))
    assert messages[0] == messages[1]  # both readers got as far
    assert ("after line 0 " not in messages[0]) == some_lines_read


def test_read_stream_yields_each_line_as_it_arrives() -> None:
    """Interactive use: a line is translated before the next one is typed (a pipe stands in for a terminal)."""
    read_fd, write_fd = os.pipe()
    got: list[str] = []
    with os.fdopen(read_fd, "rb") as reader, os.fdopen(write_fd, "wb", buffering=0) as writer:
        lines = read_stream(reader)
        writer.write("first ✓\r\n".encode())
        worker = threading.Thread(target=lambda: got.append(next(lines)), daemon=True)
        worker.start()
        worker.join(timeout=10)
        assert got == ["first ✓"]  # returned while the writer is still open
        writer.write(b"second")
        writer.close()
        assert list(lines) == ["second"]
