"""The page at / in a real headless browser (Debian's chromium driven by Playwright): translate paragraphs,
html and files, alternatives, time, errors.

Skips only when no chromium is installed (``.ci/run`` installs it: ``apt-get install chromium``).
"""

from __future__ import annotations

import shutil

import httpx
import pytest
from export_helpers import demo_sources, multilingual_checkpoint, untrained_checkpoint
from serve_helpers import reference, serving, torch_engine

from mt.serve.settings import ServeSettings

sync_api = pytest.importorskip("playwright.sync_api")
CHROMIUM = next((p for p in (shutil.which("chromium"), shutil.which("chromium-browser")) if p), None)
pytestmark = pytest.mark.skipif(CHROMIUM is None, reason="no chromium to drive (apt-get install chromium)")
WAIT_MS = 30_000


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    ckpt = untrained_checkpoint(tmp_path_factory.mktemp("serve_page") / "untrained.pt")
    engine = torch_engine(ckpt, strategy="greedy", max_len_b=4)
    with serving(engine, ServeSettings(threads=1, max_lines=3)) as (url, _):
        yield url, engine


@pytest.fixture(scope="module")
def page():
    with sync_api.sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, headless=True, args=["--no-sandbox"])
        try:
            yield browser.new_page(viewport={"width": 900, "height": 480})
        finally:
            browser.close()


def test_the_page_translates_and_shows_the_time(server, page):
    url, engine = server
    lines = demo_sources(2)
    page.goto(f"{url}/")
    sync_api.expect(page.locator("#pair")).to_have_text("(English → German)", timeout=WAIT_MS)
    page.fill("#input", "\n".join(lines))
    page.click("#translate")
    sync_api.expect(page.locator("#status")).to_contain_text("2 lines in", timeout=WAIT_MS)
    assert page.input_value("#output") == "\n".join(reference(engine, lines))
    assert page.text_content("#error") == ""


def test_the_page_shows_errors(server, page):
    url, _ = server
    page.goto(f"{url}/")
    sync_api.expect(page.locator("#pair")).not_to_be_empty(timeout=WAIT_MS)
    page.fill("#input", "one\ntwo\nthree\nfour")
    page.click("#translate")
    sync_api.expect(page.locator("#error")).to_contain_text("Error 400: 4 sentences in one request",
                                                            timeout=WAIT_MS)


def translate_api(url: str, **body) -> dict:
    answer = httpx.post(f"{url}/translate", json={"source": "auto", "target": "de", **body}, timeout=60)
    assert answer.status_code == 200, answer.text
    return answer.json()


def test_the_page_translates_a_paragraph_sentence_by_sentence(server, page):
    url, engine = server
    sentences = ["Five hundred and ninety-nine.", "Two hundred and sixty-six.", "Five thousand and forty."]
    paragraph = " ".join(sentences)
    page.goto(f"{url}/")
    sync_api.expect(page.locator("#pair")).not_to_be_empty(timeout=WAIT_MS)
    page.fill("#input", paragraph)
    page.click("#translate")
    sync_api.expect(page.locator("#status")).to_contain_text("1 line in", timeout=WAIT_MS)
    assert page.input_value("#output") == translate_api(url, q=paragraph)["translatedText"]
    assert page.input_value("#output") == " ".join(reference(engine, sentences))  # three sentences came back
    assert page.text_content("#error") == ""


def test_the_page_sends_the_format_and_shows_alternatives(server, page):
    url, _ = server
    html = "<p>Five hundred and <b>forty</b>.</p>"
    page.goto(f"{url}/")
    sync_api.expect(page.locator("#pair")).not_to_be_empty(timeout=WAIT_MS)
    page.fill("#input", html)
    page.select_option("#format", "html")
    page.click("#translate")
    expected = translate_api(url, q=html, format="html")["translatedText"]
    sync_api.expect(page.locator("#output")).to_have_value(expected, timeout=WAIT_MS)
    assert not page.is_visible("#alternatives-list")
    text = "Five hundred and forty."
    page.select_option("#format", "text")
    page.fill("#input", text)
    page.check("#alternatives")
    page.click("#translate")
    answer = translate_api(url, q=text, alternatives=3)
    sync_api.expect(page.locator("#output")).to_have_value(answer["translatedText"], timeout=WAIT_MS)
    shown = page.locator("#alternatives-list li").all_text_contents()
    assert shown == (answer["alternatives"] or ["(no other translation)"])
    page.uncheck("#alternatives")
    assert not page.is_visible("#alternatives-list")


def test_the_page_translates_a_file_and_links_the_download(server, page):
    url, _ = server
    text = "Five hundred and ninety-nine. Two hundred and sixty-six.\n\nFive thousand."
    page.goto(f"{url}/")
    sync_api.expect(page.locator("#formats")).to_contain_text(".docx", timeout=WAIT_MS)
    page.set_input_files("#file", files=[{"name": "notes.txt", "mimeType": "text/plain", "buffer": text.encode()}])
    page.click("#translate-file")
    link = page.locator("#download")
    sync_api.expect(link).to_be_visible(timeout=WAIT_MS)
    sync_api.expect(link).to_have_text("Download notes.de.txt")
    with page.expect_download(timeout=WAIT_MS) as started:
        link.click()
    download = started.value
    assert download.suggested_filename == "notes.de.txt"
    with open(download.path(), "rb") as downloaded:
        assert downloaded.read().decode("utf-8") == translate_api(url, q=text)["translatedText"]
    assert page.text_content("#error") == ""


@pytest.fixture(scope="module")
def multi_server(tmp_path_factory):
    ckpt = multilingual_checkpoint(tmp_path_factory.mktemp("serve_page_multi") / "multi.pt")
    engine = torch_engine(ckpt, strategy="greedy", max_len_b=4)
    with serving(engine, ServeSettings(threads=1)) as (url, _):
        yield url, engine


def test_a_model_of_several_targets_gets_a_target_select(multi_server, page):
    url, engine = multi_server
    lines = demo_sources(2)
    page.goto(f"{url}/")
    sync_api.expect(page.locator("#pair")).to_have_text("(English → German, French)", timeout=WAIT_MS)
    assert page.is_visible("#target")
    page.select_option("#target", "fr")
    page.fill("#input", "\n".join(lines))
    page.click("#translate")
    sync_api.expect(page.locator("#status")).to_contain_text("2 lines in", timeout=WAIT_MS)
    assert page.input_value("#output") == "\n".join(reference(engine, lines, target="fr"))
    assert reference(engine, lines, target="fr") != reference(engine, lines, target="de")


def test_a_one_target_model_has_no_select(server, page):
    url, _ = server
    page.goto(f"{url}/")
    sync_api.expect(page.locator("#pair")).not_to_be_empty(timeout=WAIT_MS)
    assert not page.is_visible("#target")


def test_the_page_of_several_models_detects_or_takes_the_source(tmp_path_factory, page):
    """en-de and de-en behind one server: the page lists both sources, detects German by default, and
    offers the targets the chosen source reaches."""
    from test_serve_models import model_set

    base = tmp_path_factory.mktemp("page_models")
    engines = {"en-de": torch_engine(untrained_checkpoint(base / "en-de.pt"), strategy="greedy", max_len_b=4),
               "de-en": torch_engine(untrained_checkpoint(base / "de-en.pt", "data.src_lang=de", "data.tgt_lang=en",
                                                          "model.d_ff=48"), strategy="greedy", max_len_b=4)}
    german = "Ein Mann fährt mit dem Fahrrad einen Hügel hinunter."
    with serving(model_set(engines, ["en-de", "de-en"]), ServeSettings(threads=1)) as (url, _):
        page.goto(f"{url}/")
        sync_api.expect(page.locator("#pair")).to_have_text("(English, German)", timeout=WAIT_MS)
        assert page.is_visible("#source-choice") and page.is_visible("#target-choice")
        page.select_option("#target", "en")
        page.fill("#input", german)
        page.click("#translate")
        sync_api.expect(page.locator("#status")).to_contain_text("from German", timeout=WAIT_MS)
        assert page.input_value("#output") == " ".join(reference(engines["de-en"], [german]))
        page.select_option("#source", "en")
        assert [o.get_attribute("value") for o in page.locator("#target option").all()] == ["de"]
        assert not page.is_visible("#target-choice")
