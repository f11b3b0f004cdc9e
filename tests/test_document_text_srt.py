"""Plain text and SubRip subtitles: units, the bytes written back, and the errors a bad file gives."""

from __future__ import annotations

import datetime

import pytest
import srt as srt_library

from mt.document.errors import DocumentError
from mt.document.formats import srt, text
from mt.document.model import Inline, Unit, check_inlines

# --- plain text


def test_text_is_one_unit_with_its_line_breaks():
    data = b"First line.\nSecond one.\n\n  Indented, after a blank line.\n"
    document = text.read(data, "notes.txt")
    assert [unit.text for unit in document.units] == [data.decode()]
    assert document.hard_breaks is True
    assert document.write(document.units) == data
    assert document.write([Unit("Erste Zeile.\nZweite.\n")]) == b"Erste Zeile.\nZweite.\n"


def test_text_keeps_a_bom_and_crlf():
    data = b"\xef\xbb\xbfcaf\xc3\xa9\r\nline\r\n"
    document = text.read(data, "bom.txt")
    assert document.units[0].text == "café\r\nline\r\n"
    assert document.write([Unit("CAFÉ\r\nLINE\r\n")]) == b"\xef\xbb\xbfCAF\xc3\x89\r\nLINE\r\n"


def test_text_empty_file():
    document = text.read(b"", "empty.txt")
    assert document.units == [Unit("")] and document.write([Unit("")]) == b""


@pytest.mark.parametrize(("data", "offset", "byte"), [(b"abc\xffdef", 3, "0xff"), (b"\xef\xbb\xbfok \xc3(", 6, "0xc3")])
def test_text_invalid_utf8_names_the_offset(data, offset, byte):
    with pytest.raises(DocumentError, match=rf"^latin\.txt: not UTF-8 text \(byte {byte} at offset {offset}\)"):
        text.read(data, "latin.txt")


def test_text_format():
    assert text.FORMAT.extensions == (".txt",) and text.FORMAT.media_type == "text/plain"


# --- subtitles

SUBTITLES = """\
1
00:00:01,000 --> 00:00:03,500
Hello there, how are
you doing today?

2
00:00:04,000 --> 00:00:06,000 X1:100 X2:200
<i>I am fine,</i> thanks.

7
00:01:00,250 --> 00:01:02,000
{\\an8}<font color="#ff0000">Red</font> <b>bold
words</b> and more words here

8
00:01:03,000 --> 00:01:04,000
<i>left open
"""


def cues(data: bytes) -> list[srt_library.Subtitle]:
    return list(srt_library.parse(data.decode("utf-8-sig")))


def test_srt_each_cue_is_one_unit_its_lines_joined():
    document = srt.read(SUBTITLES.encode(), "film.srt")
    for unit in document.units:
        check_inlines(unit.text, unit.inlines)
    assert [unit.text for unit in document.units] == [
        "Hello there, how are you doing today?",
        "I am fine, thanks.",
        "Red bold words and more words here",
        "left open",
    ]
    assert document.units[1].inlines == [Inline(0, 10, 0)]
    third = document.units[2].inlines
    assert [(i.start, i.end) for i in third] == [(0, 0), (0, 3), (4, 14)]  # {\an8} zero-width, font, b
    assert document.units[3].inlines == [Inline(0, 0, 4)]  # an <i> never closed is kept where it stood
    assert document.hard_breaks is False


def test_srt_identity_round_trip_keeps_indices_timings_and_lines():
    document = srt.read(SUBTITLES.encode(), "film.srt")
    out = document.write(document.units)
    assert out == SUBTITLES.encode() + b"\n"  # srt.compose ends every cue with a blank line
    assert [(c.index, c.start, c.end, c.proprietary) for c in cues(out)] == [
        (c.index, c.start, c.end, c.proprietary) for c in cues(SUBTITLES.encode())
    ]


def test_srt_translation_is_wrapped_into_as_many_lines_as_the_cue_had():
    document = srt.read(SUBTITLES.encode(), "film.srt")
    translated = [
        Unit("Hallo, wie geht es dir heute an diesem schönen Tag?"),
        Unit("Mir geht es gut, danke.", [Inline(0, 16, 0)]),
        Unit("Rot fett Wörter und noch mehr Wörter hier", [Inline(0, 0, 1), Inline(0, 3, 2), Inline(4, 15, 3)]),
        Unit("links offen", [Inline(0, 0, 4)]),
    ]
    out = cues(document.write(translated))
    assert [c.content for c in out] == [
        "Hallo, wie geht es dir heute\nan diesem schönen Tag?",
        "<i>Mir geht es gut,</i> danke.",
        '{\\an8}<font color="#ff0000">Rot</font> <b>fett\nWörter</b> und noch mehr Wörter hier',
        "<i>links offen",
    ]
    assert [c.index for c in out] == [1, 2, 7, 8]
    assert out[2].start == datetime.timedelta(minutes=1, milliseconds=250)


def test_srt_a_translation_without_spaces_stays_on_one_line():
    document = srt.read(b"1\n00:00:01,000 --> 00:00:02,000\nTwo\nlines\n", "one.srt")
    assert cues(document.write([Unit("一行")]))[0].content == "一行"
    assert cues(document.write([Unit("a b c d")]))[0].content == "a b\nc d"


def test_srt_keeps_crlf_and_bom():
    data = b"\xef\xbb\xbf1\r\n00:00:01,000 --> 00:00:02,000\r\nOne\r\ntwo\r\n\r\n"
    document = srt.read(data, "win.srt")
    assert document.units[0].text == "One two"
    out = document.write([Unit("EINS ZWEI")])
    assert out == b"\xef\xbb\xbf1\r\n00:00:01,000 --> 00:00:02,000\r\nEINS\r\nZWEI\r\n\r\n"


@pytest.mark.parametrize(("data", "message"), [
    (b"1\n00:00:01,000 --> 00:00:02,000\nok\n\n2\n00:00:0x --> nope\nbad\n\n3\n00:00:03,000 --> 00:00:04,000\nfine\n",
     r"^broken\.srt: line 5 \(after cue 1\) is not an SRT cue: '2\\n00:00:0x --> nope\\nbad'$"),
    (b"just some text\n", r"^broken\.srt: line 1 \(before the first cue\) is not an SRT cue: 'just some text'$"),
    (b"1\n00:00:01,000 --> 00:00:02,000\n\xe9t\xe9\n", r"^broken\.srt: not UTF-8 text \(byte 0xe9 at offset 32\)"),
])
def test_srt_a_corrupt_file_is_a_document_error(data, message):
    with pytest.raises(DocumentError, match=message):
        srt.read(data, "broken.srt")


def test_srt_empty_file_has_no_units():
    document = srt.read(b"", "empty.srt")
    assert document.units == [] and document.write([]) == b""


def test_srt_format():
    assert srt.FORMAT.extensions == (".srt",) and srt.FORMAT.media_type == "application/x-subrip"
