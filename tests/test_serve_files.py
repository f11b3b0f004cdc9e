"""mt-serve's file translation (LibreTranslate's /translate_file, /download_file, /frontend/settings), the
store of translated files, and bodies over the limits answered 413 to every client (urllib included).

The model is untrained: a file's translation is checked against what /translate answers for the same text,
and against its format's reader, not for its words.
"""

from __future__ import annotations

import io
import json
import re
import socket
import stat
import time
import urllib.error
import urllib.request

import docx
import httpx
import pytest
import srt
from export_helpers import untrained_checkpoint
from serve_helpers import serving, torch_engine

from mt.document.formats import format_for
from mt.serve.files import FileStore, StoreFull, download_name
from mt.serve.settings import ServeSettings

PARAGRAPH = "Five hundred and ninety-nine. Two hundred and sixty-six.\nFive thousand and forty."
KEY = "files-key"
TOKEN = r"[A-Za-z0-9_-]{43}"


@pytest.fixture(scope="module")
def engine(tmp_path_factory):
    ckpt = untrained_checkpoint(tmp_path_factory.mktemp("serve_files") / "untrained.pt")
    return torch_engine(ckpt, strategy="greedy", max_len_b=6)


@pytest.fixture(scope="module")
def server(engine):
    settings = ServeSettings(threads=1, max_lines=4, max_body_bytes=1_000_000, max_file_bytes=1_000_000,
                             max_file_sentences=40)
    with serving(engine, settings) as (url, app):
        yield url, app


def upload(url: str, name: str, data: bytes, **fields: str) -> httpx.Response:
    return httpx.post(f"{url}/translate_file", files={"file": (name, data)}, data={"target": "de", **fields},
                      timeout=60)


def translated_file(url: str, name: str, data: bytes) -> tuple[str, httpx.Response]:
    """The translatedFileUrl of ``name`` and what it downloads (both checked for their shapes)."""
    answer = upload(url, name, data)
    assert answer.status_code == 200, answer.text
    file_url = answer.json()["translatedFileUrl"]
    assert list(answer.json()) == ["translatedFileUrl"]
    download = httpx.get(file_url, timeout=30)
    assert download.status_code == 200, download.text
    assert download.headers["content-type"] == format_for(name).media_type
    return file_url, download


def translate_text(url: str, text: str, text_format: str = "text") -> str:
    answer = httpx.post(f"{url}/translate", json={"q": text, "target": "de", "format": text_format}, timeout=60)
    assert answer.status_code == 200, answer.text
    return answer.json()["translatedText"]


def test_a_text_file_translates_as_translate_does(server):
    url, _ = server
    file_url, download = translated_file(url, "notes.txt", PARAGRAPH.encode())
    assert re.fullmatch(rf"{re.escape(url)}/download_file/{TOKEN}/notes\.de\.txt", file_url)
    assert download.text == translate_text(url, PARAGRAPH)  # more sentences than --max-lines 4: files are not held
    assert download.text.count("\n") == 1
    assert download.headers["content-disposition"] == "attachment; filename=\"notes.de.txt\"; " \
                                                      "filename*=UTF-8''notes.de.txt"


def test_an_html_file_keeps_its_markup(server):
    url, _ = server
    page = (b"<!doctype html><html><head><title>Five hundred.</title></head><body><p>Five hundred and forty. "
            b"<b>Two hundred</b> and six.</p><p>Nine thousand.</p></body></html>")
    _, download = translated_file(url, "page.html", page)
    html = format_for("page.html")
    assert len(html.read(download.content, "page.de.html").units) == len(html.read(page, "page.html").units)
    assert download.text.count("<p>") == 2 and "<title>" in download.text


def test_a_docx_file_keeps_its_paragraphs(server):
    url, _ = server
    document = docx.Document()
    document.add_paragraph("Five hundred and ninety-nine. Two hundred and sixty-six.")
    styled = document.add_paragraph("Five thousand and ")
    styled.add_run("forty").bold = True
    styled.add_run(" four.")
    data = io.BytesIO()
    document.save(data)
    file_url, download = translated_file(url, "Report.DOCX", data.getvalue())
    assert file_url.endswith("/Report.de.docx")
    translated = docx.Document(io.BytesIO(download.content))
    paragraphs = translated.paragraphs
    assert len(paragraphs) == 2
    assert paragraphs[0].text == translate_text(url, document.paragraphs[0].text)
    assert len(format_for("x.docx").read(download.content, "x.docx").units) == 2


def test_an_srt_file_keeps_its_cues_and_timings(server):
    url, _ = server
    subtitles = ("1\n00:00:01,000 --> 00:00:02,500\nFive hundred and forty.\n\n"
                 "2\n00:00:03,000 --> 00:00:04,000\n<i>Two hundred</i> and six.\n\n")
    _, download = translated_file(url, "film.srt", subtitles.encode())
    source, translated = list(srt.parse(subtitles)), list(srt.parse(download.text))
    assert [(c.index, c.start, c.end) for c in translated] == [(c.index, c.start, c.end) for c in source]
    assert translated[0].content == translate_text(url, source[0].content)


def test_each_upload_gets_its_own_unguessable_url(server):
    url, _ = server
    first, second = (upload(url, "same.txt", b"Five hundred.").json()["translatedFileUrl"] for _ in range(2))
    tokens = [u.split("/")[-2] for u in (first, second)]
    assert tokens[0] != tokens[1] and all(re.fullmatch(TOKEN, t) for t in tokens)
    made_up = httpx.get(f"{url}/download_file/{'A' * 43}/same.de.txt")
    assert made_up.status_code == 404 and "no such file" in made_up.json()["error"]
    other_name = httpx.get(first.rsplit("/", 1)[0] + "/other.de.txt")
    assert other_name.status_code == 404
    assert httpx.get(first).status_code == 200


@pytest.mark.parametrize(
    "name, data, message",
    [
        ("notes.xyz", b"Five.", "notes.xyz: .xyz is not a format mt translates (it reads .txt, "),
        ("broken.docx", b"PK\x03\x04 not a zip", "broken.docx: not a valid .docx file"),
        ("latin.txt", "Fünf.".encode("latin-1"), "latin.txt: not UTF-8 text"),
        ("", b"Five.", "Invalid request"),
    ],
)
def test_files_that_cannot_be_read_are_400_naming_them(server, name, data, message):
    url, _ = server
    answer = upload(url, name, data)
    assert answer.status_code == 400 and answer.json()["error"].startswith(message), answer.text


def test_requests_without_a_file_are_400(server):
    url, _ = server
    for kwargs in ({"data": {"target": "de"}}, {"files": {"q": (None, "Five.")}, "data": {"target": "de"}},
                   {"files": {"other": ("a.txt", b"Five.")}, "data": {"target": "de"}}):
        answer = httpx.post(f"{url}/translate_file", **kwargs)
        assert answer.status_code == 400 and answer.json()["error"].startswith("Invalid request"), answer.text
    missing = httpx.post(f"{url}/translate_file", files={"q": (None, "x")}, data={"target": "de"})
    assert missing.json() == {"error": "Invalid request: missing file parameter"}
    assert upload(url, "a.txt", b"Five.", target="xx").json() == {
        "error": "xx is not supported (served: en -> de)"}


def test_a_file_over_the_limits_is_refused(server):
    url, _ = server
    just_over = upload(url, "big.txt", b"a" * 1_000_001)  # within the body's bound: the route counts the file
    far_over = upload(url, "big.txt", b"a" * 3_000_000)  # past the body's bound: the middleware answers
    for answer in (just_over, far_over):
        assert answer.status_code == 413 and answer.json() == {"error": "file over --max-file-bytes 1000000"}
    many = " ".join(["Five."] * 41)
    too_many = upload(url, "many.txt", many.encode())
    assert too_many.status_code == 400
    assert too_many.json()["error"] == "many.txt: 41 sentences, more than --max-file-sentences 40"


def test_the_body_limit_does_not_cut_a_file_below_max_file_bytes(engine):
    settings = ServeSettings(threads=1, max_body_bytes=1000, max_file_bytes=20_000)
    with serving(engine, settings) as (url, _):
        answer = upload(url, "long.txt", ("Five. " * 3000).encode()[:19_000])
        assert answer.status_code == 200, answer.text
        assert httpx.post(f"{url}/translate", json={"q": "a" * 2000, "target": "de"}).status_code == 413


def test_frontend_settings_has_libretranslates_shape(server):
    url, _ = server
    settings = httpx.get(f"{url}/frontend/settings").json()
    assert settings == {
        "charLimit": (1_000_000 - 1000) // 6,
        "frontendTimeout": 500,
        "apiKeys": False,
        "keyRequired": False,
        "suggestions": False,
        "filesTranslation": True,
        "supportedFilesFormat": settings["supportedFilesFormat"],
        "language": {"source": {"code": "en", "name": "English"}, "target": {"code": "de", "name": "German"}},
    }
    assert {".txt", ".html", ".md", ".srt", ".docx", ".odt", ".pptx"} <= set(settings["supportedFilesFormat"])


def test_metrics_count_the_file_routes(server):
    url, _ = server
    translated_file(url, "count.txt", b"Five.")
    text = httpx.get(f"{url}/metrics").text
    assert 'mt_requests_total{code="200",route="/translate_file"}' in text
    assert 'mt_requests_total{code="200",route="/download_file"}' in text
    assert 'route="/frontend/settings"' in text or httpx.get(f"{url}/frontend/settings").status_code == 200


def test_files_expire_are_removed_and_need_the_key(engine):
    settings = ServeSettings(threads=1, file_ttl_s=0.5, api_keys=frozenset({KEY}))
    with serving(engine, settings) as (url, app):
        directory = app.state.files.directory
        assert stat.S_IMODE(directory.stat().st_mode) == 0o700
        assert upload(url, "a.txt", b"Five.").status_code == 403
        assert httpx.get(f"{url}/frontend/settings").json()["keyRequired"] is True
        file_url = upload(url, "a.txt", b"Five.", api_key=KEY).json()["translatedFileUrl"]
        assert httpx.get(file_url).status_code == 200
        assert len(list(directory.iterdir())) == 1
        time.sleep(0.6)
        gone = httpx.get(file_url)
        assert gone.status_code == 404 and gone.headers["content-type"] == "application/json"
        assert "--file-ttl 0.5 s" in gone.json()["error"]
        assert list(directory.iterdir()) == []
        upload(url, "b.txt", b"Five.", api_key=KEY)
    assert not directory.exists()  # removed at shutdown, with what it held


def test_the_store_keeps_files_for_their_ttl_within_its_bound(tmp_path):
    now = [0.0]
    store = FileStore(ttl_s=10, max_bytes=10, clock=lambda: now[0])
    store.open()
    first = store.put(b"12345", "a.de.txt", "text/plain")
    second = store.put(b"1234", "b.de.txt", "text/plain")
    assert store.get(first, "a.de.txt")[1] == b"12345" and store.get(first, "b.de.txt") is None
    third = store.put(b"123", "c.de.txt", "text/plain")  # 12 bytes: the oldest goes
    assert store.get(first, "a.de.txt") is None and store.get(second, "b.de.txt") is not None
    assert sorted(p.name for p in store.directory.iterdir()) == sorted([second, third])
    with pytest.raises(StoreFull):
        store.put(b"x" * 11, "d.de.txt", "text/plain")
    now[0] = 10.0
    assert store.get(second, "b.de.txt") is None and list(store.directory.iterdir()) == []
    directory = store.directory
    store.close()
    assert not directory.exists()


@pytest.mark.parametrize(
    "uploaded, name",
    [("report.docx", "report.de.docx"), ("../../etc/passwd.txt", "passwd.de.txt"), ("C:\\x\\a b.TXT", "a b.de.txt"),
     ('q"u;o\nte.txt', "q_u_o_te.de.txt"), (".txt", "file.de.txt"), ("Übersicht.txt", "Übersicht.de.txt")],
)
def test_download_names_are_safe(uploaded, name):
    extension = "." + uploaded.rsplit(".", 1)[1].lower()
    assert download_name(uploaded, "de", extension) == name


def urllib_post(url: str, body, headers: dict[str, str]) -> urllib.error.HTTPError:
    request = urllib.request.Request(url, data=body, headers=headers, method="POST")
    with pytest.raises(urllib.error.HTTPError) as raised:
        urllib.request.urlopen(request, timeout=60)
    return raised.value


def test_a_body_over_the_limit_is_a_413_that_urllib_reads(server):
    url, _ = server
    body = json.dumps({"q": "a" * 20_000_000, "target": "de"}).encode()
    error = urllib_post(f"{url}/translate", body, {"Content-Type": "application/json"})
    assert error.code == 413 and json.loads(error.read()) == {"error": "request body over --max-body-bytes 1000000"}
    chunks = (body[i : i + 65536] for i in range(0, len(body), 65536))  # no Content-Length: sent chunked
    error = urllib_post(f"{url}/translate", chunks, {"Content-Type": "application/json"})
    assert error.code == 413 and json.loads(error.read()) == {"error": "request body over --max-body-bytes 1000000"}
    answer = httpx.post(f"{url}/translate", content=body, headers={"Content-Type": "application/json"}, timeout=60)
    assert answer.status_code == 413 and answer.json()["error"].startswith("request body over")


def test_a_client_waiting_for_100_continue_gets_the_413_at_once(server):
    url, _ = server
    host, port = url.removeprefix("http://").split(":")
    with socket.create_connection((host, int(port)), timeout=30) as sock:
        sock.sendall(b"POST /translate HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                     b"Content-Length: 20000000\r\nExpect: 100-continue\r\n\r\n")
        answer = b""
        while chunk := sock.recv(65536):  # the server closes the connection after its answer
            answer += chunk
    head, body = answer.split(b"\r\n\r\n", 1)
    assert head.startswith(b"HTTP/1.1 413") and b"connection: close" in head.lower()
    assert b"100 Continue" not in head and json.loads(body)["error"].startswith("request body over")


def test_a_keep_alive_client_goes_on_after_a_413(server):
    url, _ = server
    with httpx.Client(timeout=60) as client:
        refused = client.post(f"{url}/translate", content=b"x" * 2_000_000, headers={"Content-Type": "text/plain"})
        assert refused.status_code == 413
        assert client.post(f"{url}/translate", json={"q": "Five.", "target": "de"}).status_code == 200


def test_a_file_over_the_limit_is_a_413_that_urllib_reads(server):
    url, _ = server
    boundary = "mt-test-boundary"
    body = (f'--{boundary}\r\nContent-Disposition: form-data; name="target"\r\n\r\nde\r\n'
            f'--{boundary}\r\nContent-Disposition: form-data; name="file"; filename="big.txt"\r\n'
            f"Content-Type: text/plain\r\n\r\n").encode() + b"a" * 20_000_000 + f"\r\n--{boundary}--\r\n".encode()
    error = urllib_post(f"{url}/translate_file", body, {"Content-Type": f"multipart/form-data; boundary={boundary}"})
    assert error.code == 413 and json.loads(error.read()) == {"error": "file over --max-file-bytes 1000000"}
