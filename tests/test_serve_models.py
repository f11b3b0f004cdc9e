"""mt-serve with several models: /languages the union, routing, a pivot, /detect and source=auto, lazy loading
and unloading, per-model metrics; each answer equal to its model's mt-translate answer.

The models have random weights (tests/export_helpers): en-de and de-en of different shapes and an en-de+fr
model of two targets, so an answer from the wrong model or target would show.
"""

from __future__ import annotations

import asyncio
import time

import httpx
import pytest
from export_helpers import demo_sources, multilingual_checkpoint, untrained_checkpoint
from serve_helpers import reference, serving, torch_engine

from mt.serve.models import ModelSet, ModelSpec, ServedModel
from mt.serve.routing import Languages
from mt.serve.settings import ServeSettings

LINES = demo_sources(4)
ENGLISH = "A man in a blue shirt is riding a bicycle down the street."
GERMAN = "Ein Mann in einem blauen Hemd fährt mit dem Fahrrad die Straße entlang."


@pytest.fixture(scope="module")
def checkpoints(tmp_path_factory):
    base = tmp_path_factory.mktemp("serve_models")
    (base / "a").mkdir(), (base / "b").mkdir(), (base / "c").mkdir()
    return {
        "en-de": untrained_checkpoint(base / "a" / "en-de.pt"),
        "de-en": untrained_checkpoint(base / "b" / "de-en.pt", "data.src_lang=de", "data.tgt_lang=en",
                                      "model.d_ff=48"),
        "en-de+fr": multilingual_checkpoint(base / "c" / "multi.pt"),
    }


@pytest.fixture(scope="module")
def engines(checkpoints):
    return {name: torch_engine(path, strategy="greedy") for name, path in checkpoints.items()}


def spec(name: str, engine, loads: list[str] | None = None) -> ModelSpec:
    """A spec whose load hands out ``engine`` (and records its name in ``loads``)."""
    languages = Languages(name, engine.source_lang, tuple(engine.target_langs), engine.tagged)

    def load():
        if loads is not None:
            loads.append(name)
        return engine

    return ModelSpec(languages, load, (name,), "mt", name)


def model_set(engines, names, *, lazy=False, max_loaded=None, loads=None) -> ModelSet:
    models = ModelSet([ServedModel(spec(n, engines[n], loads)) for n in names], max_loaded)
    if not lazy:
        for model in models.models:
            model.load()
    return models


@pytest.fixture(scope="module")
def server(engines):
    with serving(model_set(engines, ["en-de", "de-en", "en-de+fr"]), ServeSettings(threads=1)) as (url, app):
        yield url, app


def v1(url: str, **body):
    answer = httpx.post(f"{url}/v1/translate", json=body, timeout=60)
    assert answer.status_code == 200, answer.text
    return answer.json()


def test_languages_are_the_union_with_the_pivots(server):
    url, _ = server
    assert httpx.get(f"{url}/languages").json() == [
        {"code": "en", "name": "English", "targets": ["de", "fr"]},
        {"code": "de", "name": "German", "targets": ["en", "fr"]},  # fr through en
        {"code": "fr", "name": "French", "targets": []},
    ]


def test_a_pair_goes_to_the_first_model_that_serves_it(server, engines):
    url, _ = server
    en_de = v1(url, q=LINES, source="en", target="de", split_sentences=False)
    assert en_de["models"] == ["en-de"]
    assert [t["text"] for t in en_de["translations"]] == reference(engines["en-de"], LINES)
    en_fr = v1(url, q=LINES, source="en", target="fr", split_sentences=False)
    assert en_fr["models"] == ["en-de+fr"]
    assert [t["text"] for t in en_fr["translations"]] == reference(engines["en-de+fr"], LINES, target="fr")
    back = httpx.post(f"{url}/translate", json={"q": LINES, "source": "de", "target": "en"}).json()
    assert back["translatedText"] == reference(engines["de-en"], LINES)


def test_a_request_may_name_its_model(server, engines):
    url, _ = server
    named = v1(url, q=LINES, source="en", target="de", model="en-de+fr", split_sentences=False)
    assert named["models"] == ["en-de+fr"]
    assert [t["text"] for t in named["translations"]] == reference(engines["en-de+fr"], LINES, target="de")
    wrong = httpx.post(f"{url}/v1/translate", json={"q": "one", "source": "en", "target": "en", "model": "de-en"})
    assert wrong.status_code == 400
    assert wrong.json()["error"] == "model de-en does not translate en -> en (served: de -> en)"
    unknown = httpx.post(f"{url}/v1/translate", json={"q": "one", "target": "de", "source": "en", "model": "x"})
    assert unknown.json()["error"] == "no model x (the models: en-de, de-en, en-de+fr)"


def test_a_pair_without_a_model_is_translated_through_a_pivot(server, engines):
    url, _ = server
    through = reference(engines["de-en"], LINES)
    expected = reference(engines["en-de+fr"], through, target="fr")
    answer = v1(url, q=LINES, source="de", target="fr", split_sentences=False)
    assert answer["models"] == ["de-en", "en-de+fr"]
    assert [t["text"] for t in answer["translations"]] == expected
    libre = httpx.post(f"{url}/translate", json={"q": LINES, "source": "de", "target": "fr"}).json()
    assert libre["translatedText"] == expected


def test_a_pair_no_path_reaches_is_400_naming_what_is_served(server):
    url, _ = server
    served = "(served: en -> de, fr; de -> en)"
    for source, target, wrong in (("fr", "de", "fr"), ("en", "cs", "cs"), ("de", "de", "de")):
        answer = httpx.post(f"{url}/translate", json={"q": "one", "source": source, "target": target})
        assert answer.status_code == 400
        assert answer.json() == {"error": f"{wrong} is not supported {served}"}


def test_detect_answers_libretranslate_shape_among_the_sources(server):
    url, _ = server
    for text, lang in ((ENGLISH, "en"), (GERMAN, "de")):
        found = httpx.post(f"{url}/detect", json={"q": text}).json()
        assert [f["language"] for f in found] == [lang, "de" if lang == "en" else "en"]  # sources only: no fr
        assert found[0]["confidence"] > found[1]["confidence"] >= 0
        assert all(0 <= f["confidence"] <= 100 for f in found)
    form = httpx.post(f"{url}/detect", data={"q": GERMAN}).json()
    assert form[0]["language"] == "de"
    assert httpx.post(f"{url}/detect", json={}).status_code == 400


def test_source_auto_routes_each_text_by_its_language(server, engines):
    url, _ = server
    answer = httpx.post(f"{url}/translate", json={"q": [ENGLISH, GERMAN], "source": "auto", "target": "en"})
    assert answer.status_code == 400  # English into English: not served
    answer = httpx.post(f"{url}/translate", json={"q": [ENGLISH, GERMAN], "source": "auto", "target": "fr"}).json()
    assert [d["language"] for d in answer["detectedLanguage"]] == ["en", "de"]
    english = reference(engines["en-de+fr"], [ENGLISH], target="fr")
    german = reference(engines["en-de+fr"], reference(engines["de-en"], [GERMAN]), target="fr")
    assert answer["translatedText"] == english + german


def test_per_model_metrics(server):
    url, _ = server
    v1(url, q=LINES, source="de", target="fr", split_sentences=False)
    metrics = httpx.get(f"{url}/metrics").text
    for name in ("de-en", "en-de+fr"):
        assert f'mt_model_requests_total{{model="{name}"}}' in metrics
        assert f'mt_sentences_translated_total{{model="{name}"}}' in metrics
        assert f'mt_model_resident_bytes{{model="{name}"}}' in metrics


def test_models_lists_each_model(server):
    url, _ = server
    models = httpx.get(f"{url}/v1/models").json()
    assert [(m["name"], m["pairs"], m["engine"], m["loaded"]) for m in models] == [
        ("en-de", ["en-de"], "mt", True), ("de-en", ["de-en"], "mt", True),
        ("en-de+fr", ["en-de", "en-fr"], "mt", True)]
    assert all(m["parameters"] > 0 for m in models)


def test_lazy_models_load_on_first_use_and_the_least_recent_unloads(engines):
    loads: list[str] = []
    models = model_set(engines, ["en-de", "de-en"], lazy=True, max_loaded=1, loads=loads)
    with serving(models, ServeSettings(threads=1)) as (url, _):
        assert loads == [] and not any(m["loaded"] for m in httpx.get(f"{url}/v1/models").json())
        for source, target in (("en", "de"), ("de", "en"), ("en", "de"), ("en", "de")):
            v1(url, q=LINES[:1], source=source, target=target)
        assert loads == ["en-de", "de-en", "en-de"]  # the last request found en-de loaded
        listed = {m["name"]: m for m in httpx.get(f"{url}/v1/models").json()}
        assert listed["en-de"]["loaded"] and not listed["de-en"]["loaded"]
        assert listed["en-de"]["loads"] == 2 and listed["de-en"]["resident_bytes"] == 0
        assert 'mt_model_loads_total{model="en-de"} 2.0' in httpx.get(f"{url}/metrics").text


class Timed:
    """A model's engine that takes ``seconds`` per decoding call (to make a flood of one model slow)."""

    def __init__(self, inner, seconds: float) -> None:
        self.inner, self.seconds = inner, seconds
        self.source_lang, self.target_langs, self.tagged = inner.source_lang, inner.target_langs, inner.tagged
        self.description, self.max_src_len, self.on_too_long = "timed", inner.max_src_len, inner.on_too_long

    def settings(self, options):
        return self.inner.settings(options)

    def count_pieces(self, line, target=None):
        return self.inner.count_pieces(line, target)

    def translate(self, lines, options, targets=None, on_done=None, align=None):
        time.sleep(self.seconds)
        return self.inner.translate(lines, options, targets, align=align)


def test_a_flood_of_one_model_does_not_starve_another(engines):
    """64 requests to en-de at once, each its own batch of 0.1 s, then requests to de-en one at a time: each
    de-en request waits for at most the en-de batch in progress and its own (round robin), not the flood."""
    slow = {"en-de": Timed(engines["en-de"], 0.1), "de-en": Timed(engines["de-en"], 0.1)}
    models = model_set(slow, ["en-de", "de-en"])
    settings = ServeSettings(threads=1, max_batch_tokens=1, max_wait_ms=0)  # one request a batch

    async def run(url: str) -> tuple[float, list[float]]:
        async with httpx.AsyncClient(timeout=120) as client:
            start = time.monotonic()
            flood = [asyncio.create_task(client.post(f"{url}/translate", json={"q": "one", "source": "en",
                                                                                 "target": "de"}))
                     for _ in range(64)]
            await asyncio.sleep(0.3)  # the flood is queued
            waits = []
            for _ in range(5):
                asked = time.monotonic()
                answer = await client.post(f"{url}/translate", json={"q": "eins", "source": "de", "target": "en"})
                assert answer.status_code == 200
                waits.append(time.monotonic() - asked)
            assert all(r.status_code == 200 for r in await asyncio.gather(*flood))
            return time.monotonic() - start, waits

    with serving(models, settings) as (url, _):
        total, waits = asyncio.run(run(url))
    assert total > 6  # the flood alone: 64 batches of 0.1 s
    assert max(waits) < 1.0, waits  # two batches and the request's own overhead, not the flood's 6 s
