"""mt-serve --ct2: a CTranslate2 export behind the same API, answers equal to the export's own offline use."""

from __future__ import annotations

import asyncio

import httpx
import pytest
from export_helpers import demo_model
from serve_helpers import reference, serving, torch_engine

from mt.cli.export import main as export_main
from mt.errors import UserError
from mt.serve.ct2_engine import Ct2Engine
from mt.serve.engine import Options
from mt.serve.settings import ServeSettings

REQUESTS = 12


@pytest.fixture(scope="module")
def demo(tmp_path_factory):
    return demo_model(tmp_path_factory.getbasetemp() / "export_demo")


@pytest.fixture(scope="module")
def engine(demo, tmp_path_factory):
    out = tmp_path_factory.mktemp("serve_ct2") / "ct2"
    assert export_main(["--to", "ctranslate2", "--ckpt", str(demo.ckpt), "--out", str(out)]) == 0
    return Ct2Engine.load(out, {}, threads=1, source_lang="en", target_lang="de")


def test_the_readme_defaults_are_the_engines(engine):
    assert (engine.defaults.beam_size, engine.defaults.length_penalty) == (4, "length")
    assert engine.max_src_len == 255 and engine.max_decoding_length == 255


@pytest.mark.parametrize("options", [Options(), Options(strategy="greedy")], ids=["beam", "greedy"])
def test_concurrent_requests_equal_one_offline_call(demo, engine, options):
    lines = demo.sources[:REQUESTS * 2]
    offline = [o.text for o in engine.translate(lines, options)]
    body = {k: v for k, v in vars(options).items() if v is not None}
    with serving(engine, ServeSettings(threads=1, max_wait_ms=20)) as (url, _):

        async def send_all():
            async with httpx.AsyncClient(timeout=60) as client:
                pairs = [lines[i : i + 2] for i in range(0, len(lines), 2)]
                return await asyncio.gather(*(client.post(f"{url}/v1/translate", json={"q": p, **body})
                                              for p in pairs))

        answers = asyncio.run(send_all())
    assert [t["text"] for a in answers for t in a.json()["translations"]] == offline


def test_greedy_equals_mt_translate(demo, engine):
    lines = demo.sources[:20]
    mt = torch_engine(demo.ckpt)
    greedy = Options(strategy="greedy")
    assert [o.text for o in engine.translate(lines, greedy)] == reference(mt, lines, greedy)


def test_gnmt_and_a_missing_model_are_refused_by_name(engine, tmp_path):
    with pytest.raises(UserError, match="no GNMT length penalty"):
        Ct2Engine.load(engine.directory, {"length_penalty": "gnmt"}, 1, "en", "de")
    with pytest.raises(UserError, match="no model.bin"):
        Ct2Engine.load(tmp_path, {}, 1, "en", "de")


def test_word_links_from_ctranslate2s_attention(demo, engine):
    """An export aligns through CTranslate2's own attention: every target word linked to a source word."""
    lines = demo.sources[:4]
    outputs = engine.translate(lines, Options(), align=[True, False, True, True])
    assert outputs[1].links is None
    for line, output in zip(lines, outputs, strict=True):
        if output.links is None:
            continue
        target_words, source_words = len(output.text.split()), len(line.split())
        assert {t for _, t in output.links} == set(range(target_words))
        assert all(0 <= s < source_words for s, _ in output.links)
    assert [o.text for o in outputs] == [o.text for o in engine.translate(lines, Options())]


def test_a_ct2_export_beside_its_checkpoint_serves_as_a_second_model(demo, engine):
    """``--ckpt CKPT --ct2 DIR``: two models of one pair, in the flags' order; the first serves the pair, the
    export answers when named, each as it does alone."""
    from mt.cli.serve import load_models, parse_args

    models = load_models(parse_args(["--ckpt", str(demo.ckpt), "--ct2", str(engine.directory), "--threads", "1"]))
    assert [(m.name, m.spec.kind) for m in models.models] == [("en-de", "mt"), ("en-de-2", "ct2")]
    lines = demo.sources[:4]
    with serving(models, ServeSettings(threads=1)) as (url, _):
        routed = httpx.post(f"{url}/v1/translate", json={"q": lines, "split_sentences": False}).json()
        named = httpx.post(f"{url}/v1/translate", json={"q": lines, "model": "en-de-2", "split_sentences": False,
                                                        "source": "en"}).json()
        listed = httpx.get(f"{url}/v1/models").json()
    assert routed["models"] == ["en-de"] and named["models"] == ["en-de-2"]
    assert [t["text"] for t in routed["translations"]] == reference(torch_engine(demo.ckpt), lines)
    assert [t["text"] for t in named["translations"]] == [o.text for o in engine.translate(lines, Options())]
    assert [(m["engine"], m["parameters"] is None) for m in listed] == [("mt", False), ("ct2", True)]
