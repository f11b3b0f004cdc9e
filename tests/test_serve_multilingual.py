"""mt-serve with a model of several target languages: each request's target routed, answers equal mt-translate's.

The model (tests/export_helpers.multilingual_checkpoint, en-de and en-fr) has random weights: its outputs
differ between the tags, so an answer in the wrong language would show.
"""

from __future__ import annotations

import argparse
import asyncio

import httpx
import pytest
from export_helpers import MULTI_TARGETS, demo_sources, multilingual_checkpoint
from serve_helpers import GatedEngine, reference, serving, torch_engine

from mt.checkpoint import load_for_inference
from mt.cli.serve import served_languages
from mt.data.languages import LanguageError
from mt.errors import UserError
from mt.export import export_ctranslate2
from mt.serve.ct2_engine import Ct2Engine
from mt.serve.engine import Options
from mt.serve.settings import ServeSettings

LINES = demo_sources(6)


@pytest.fixture(scope="module")
def ckpt(tmp_path_factory):
    return multilingual_checkpoint(tmp_path_factory.mktemp("serve_multi") / "multi.pt")


@pytest.fixture(scope="module")
def server(ckpt):
    engine = torch_engine(ckpt, strategy="greedy")
    with serving(engine) as (url, _):
        yield url, engine


def test_languages_lists_every_target_of_the_source(server):
    url, _ = server
    assert httpx.get(f"{url}/languages").json() == [
        {"code": "en", "name": "English", "targets": ["de", "fr"]},
        {"code": "de", "name": "German", "targets": []},
        {"code": "fr", "name": "French", "targets": []},
    ]


def test_each_target_answers_as_mt_translate_does(server):
    url, engine = server
    answers = {}
    for lang in MULTI_TARGETS:
        expected = reference(engine, LINES, target=lang)
        libre = httpx.post(f"{url}/translate", json={"q": LINES, "source": "en", "target": lang}).json()
        v1 = httpx.post(f"{url}/v1/translate", json={"q": LINES, "target": lang}).json()
        assert libre["translatedText"] == expected
        assert [t["text"] for t in v1["translations"]] == expected
        answers[lang] = expected
    assert answers["de"] != answers["fr"]


PAIRS = "(served: en -> de, fr)"


@pytest.mark.parametrize(("route", "body", "message"), [
    ("/translate", {"q": "one", "source": "en", "target": "cs"}, f"cs is not supported {PAIRS}"),
    ("/translate", {"q": "one", "source": "de", "target": "fr"}, f"de is not supported {PAIRS}"),
    ("/v1/translate", {"q": "one", "target": "xx"}, f"xx is not supported {PAIRS}"),
    ("/v1/translate", {"q": "one"}, f"Invalid request: missing target parameter {PAIRS}"),
])
def test_a_target_the_model_lacks_is_a_400(server, route, body, message):
    url, _ = server
    response = httpx.post(f"{url}{route}", json=body)
    assert (response.status_code, response.json()) == (400, {"error": message})


def test_concurrent_requests_for_different_targets_share_a_batch(ckpt):
    engine = GatedEngine(torch_engine(ckpt, strategy="greedy"))
    targets = [MULTI_TARGETS[i % 2] for i in range(len(LINES))]

    async def ask(client, url, line, lang):
        response = await client.post(f"{url}/translate", json={"q": line, "source": "en", "target": lang})
        return response.json()["translatedText"]

    async def run(url, worker):
        async with httpx.AsyncClient(timeout=60) as client:
            held = asyncio.ensure_future(ask(client, url, "hold", "de"))
            while not engine.busy.is_set():  # the worker holds the first batch: the others queue meanwhile
                await asyncio.sleep(0.01)
            rest = [asyncio.ensure_future(ask(client, url, line, lang))
                    for line, lang in zip(LINES, targets, strict=True)]
            while worker.depth() < len(rest):
                await asyncio.sleep(0.01)
            engine.gate.set()
            return await held, await asyncio.gather(*rest)

    with serving(engine, ServeSettings(threads=1)) as (url, app):
        _, answers = asyncio.run(run(url, app.state.front.worker))
    assert engine.batches == [1, len(LINES)]  # the held line, then every other line, both targets, in one batch
    expected = {lang: reference(engine.inner, LINES, target=lang) for lang in MULTI_TARGETS}
    assert answers == [expected[lang][i] for i, lang in enumerate(targets)]


def test_mt_serve_target_lang_must_be_one_of_the_models(ckpt):
    _, _, cfg = load_for_inference(ckpt)
    args = argparse.Namespace(source_lang=None, target_lang=None)
    assert served_languages(cfg, args) == ("en", ["de", "fr"], True)
    with pytest.raises(LanguageError, match="target language 'cs' is not one of this model's: de, fr"):
        served_languages(cfg, argparse.Namespace(source_lang=None, target_lang="cs"))


def test_ct2_engine_serves_the_exports_targets_as_mt_does(tmp_path):
    ckpt = multilingual_checkpoint(tmp_path / "multi.pt", "decode.max_len_a=0", "decode.max_len_b=12")
    export_ctranslate2(ckpt, tmp_path / "ct2")
    engine = Ct2Engine.load(tmp_path / "ct2", {}, threads=1, source_lang="en", target_lang=None)
    assert (engine.target_langs, engine.tagged) == (MULTI_TARGETS, True)
    greedy = Options(strategy="greedy")
    targets = [MULTI_TARGETS[i % 2] for i in range(len(LINES))]
    mixed = [o.text for o in engine.translate(LINES, greedy, targets)]  # both targets in one batch
    reference_engine = torch_engine(ckpt, strategy="greedy")
    expected = {lang: reference(reference_engine, LINES, target=lang) for lang in MULTI_TARGETS}
    assert mixed == [expected[lang][i] for i, lang in enumerate(targets)]
    assert engine.count_pieces(LINES[0], "fr") == engine.count_pieces(LINES[0]) + 1
    with pytest.raises(UserError, match="--target-lang cs: this export translates into de, fr"):
        Ct2Engine.load(tmp_path / "ct2", {}, threads=1, source_lang="en", target_lang="cs")
