"""The page at / in a real headless browser (Debian's chromium driven by Playwright): translate, time, errors.

Skips only when no chromium is installed (``.ci/run`` installs it: ``apt-get install chromium``).
"""

from __future__ import annotations

import shutil

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
    sync_api.expect(page.locator("#error")).to_contain_text("Error 400: 4 lines in one request", timeout=WAIT_MS)


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
