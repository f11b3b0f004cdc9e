"""mt-serve with an imported NLLB-style model: its languages under LibreTranslate's codes, each request's source and
target handed to the model as its own codes, answers equal to mt-translate's ``--source-lang``/``--target-lang``.

The model (tests/pretrained_helpers.m2m100_directory, NLLB's layout: ``eng_Latn deu_Latn fra_Latn``) has random
weights: its outputs differ between the source codes and the target codes, so a wrong code would show.
"""

from __future__ import annotations

import asyncio

import httpx
import pytest
from pretrained_helpers import NLLB_CODES, captions, m2m100_directory
from serve_helpers import serving

from mt.cli.serve import load_models, parse_args
from mt.cli.translate import main as translate_main
from mt.document.language import LANGUAGES
from mt.errors import UserError
from mt.pretrained import import_hf
from mt.serve.language_codes import LIBRETRANSLATE, coded_languages, served_codes
from mt.serve.settings import ServeSettings

SERVED = "(served: between any two of en, de, fr)"


@pytest.fixture(scope="module")
def ckpt(tmp_path_factory, multi30k_dir):
    base = tmp_path_factory.mktemp("serve_nllb")
    directory = m2m100_directory(base / "hf", multi30k_dir, nllb=True, eos_bias=14.0)
    return import_hf(directory, base / "nllb.pt").out


@pytest.fixture(scope="module")
def lines(multi30k_dir):
    return {"en": captions(multi30k_dir, "en", 2006)[2000:], "fr": captions(multi30k_dir, "fr", 2006)[2000:]}


@pytest.fixture(scope="module")
def server(ckpt):
    models = load_models(parse_args(["--ckpt", str(ckpt), "--strategy", "greedy"]))
    with serving(models, ServeSettings(threads=1, max_wait_ms=200)) as (url, _):
        yield url


@pytest.fixture(scope="module")
def mt_translate(ckpt, tmp_path_factory):
    """mt-translate's output of lines from ``source`` into ``target`` (NLLB's codes), each asked once."""
    base, found = tmp_path_factory.mktemp("mt_translate"), {}

    def run(texts: list[str], source: str, target: str) -> list[str]:
        key = (tuple(texts), source, target)
        if key not in found:
            given, out = base / f"in{len(found)}.txt", base / f"out{len(found)}.txt"
            given.write_text("\n".join(texts) + "\n", encoding="utf-8")
            assert translate_main(["--ckpt", str(ckpt), "--input", str(given), "--output", str(out), "--strategy",
                                   "greedy", "--source-lang", source, "--target-lang", target]) == 0
            found[key] = out.read_text(encoding="utf-8").splitlines()
        return found[key]

    return run


def libre(url: str, q, source: str, target: str) -> httpx.Response:
    return httpx.post(f"{url}/translate", json={"q": q, "source": source, "target": target}, timeout=60)


def test_languages_are_listed_under_libretranslate_codes(server):
    assert httpx.get(f"{server}/languages").json() == [
        {"code": "en", "name": "English", "targets": ["de", "fr"]},
        {"code": "de", "name": "German", "targets": ["fr", "en"]},
        {"code": "fr", "name": "French", "targets": ["de", "en"]},
    ]
    settings = httpx.get(f"{server}/frontend/settings").json()["language"]
    assert (settings["source"]["code"], settings["target"]["code"]) == ("en", "de")
    model = httpx.get(f"{server}/v1/models").json()[0]
    assert model["name"] == "nllb"
    assert model["pairs"] == ["en-de", "en-fr", "de-fr", "de-en", "fr-de", "fr-en"]


def test_each_target_answers_as_mt_translate_does(server, lines, mt_translate):
    answers = {}
    for target in ("de", "fr"):
        expected = mt_translate(lines["en"], NLLB_CODES["en"], NLLB_CODES[target])
        assert libre(server, lines["en"], "en", target).json()["translatedText"] == expected
        v1 = httpx.post(f"{server}/v1/translate", json={"q": lines["en"], "source": "en", "target": target,
                                                        "split_sentences": False}, timeout=60).json()
        assert [t["text"] for t in v1["translations"]] == expected
        answers[target] = expected
    assert answers["de"] != answers["fr"]


def test_the_source_language_is_the_requests(server, lines, mt_translate):
    """French into German reads fra_Latn first: the same text read as English translates otherwise."""
    from_french = mt_translate(lines["fr"], NLLB_CODES["fr"], NLLB_CODES["de"])
    assert libre(server, lines["fr"], "fr", "de").json()["translatedText"] == from_french
    as_english = libre(server, lines["fr"], "en", "de").json()["translatedText"]
    assert as_english == mt_translate(lines["fr"], NLLB_CODES["en"], NLLB_CODES["de"])
    assert as_english != from_french


def test_the_models_own_codes_are_accepted(server, lines, mt_translate):
    expected = mt_translate(lines["en"], NLLB_CODES["en"], NLLB_CODES["de"])
    for source, target in (("eng_Latn", "deu_Latn"), ("eng_Latn", "de"), ("en", "deu_Latn")):
        assert libre(server, lines["en"], source, target).json()["translatedText"] == expected
    french = libre(server, lines["fr"], "fra_Latn", "deu_Latn").json()["translatedText"]
    assert french == mt_translate(lines["fr"], NLLB_CODES["fr"], NLLB_CODES["de"])


def test_an_unknown_code_is_400_naming_what_is_served(server):
    for source, target, wrong in (("xx", "de", "xx"), ("en", "cs", "cs"), ("en", "ces_Latn", "ces_Latn"),
                                  ("de", "de", "de")):
        answer = libre(server, "A dog.", source, target)
        assert answer.status_code == 400
        assert answer.json() == {"error": f"{wrong} is not supported {SERVED}"}


def test_source_auto_detects_among_the_served_codes(server, lines, mt_translate):
    english, french = lines["en"][5], lines["fr"][1]
    found = httpx.post(f"{server}/detect", json={"q": french}).json()
    assert sorted(f["language"] for f in found) == ["de", "en", "fr"] and found[0]["language"] == "fr"
    answer = libre(server, [english, french], "auto", "de").json()
    assert [d["language"] for d in answer["detectedLanguage"]] == ["en", "fr"]
    assert answer["translatedText"] == [mt_translate(lines["en"], NLLB_CODES["en"], NLLB_CODES["de"])[5],
                                        mt_translate(lines["fr"], NLLB_CODES["fr"], NLLB_CODES["de"])[1]]


def test_concurrent_requests_of_different_sources_keep_their_own(server, lines, mt_translate):
    """Requests from English and from French queued together (one gather window): each is decoded from its own
    source's code (the worker batches one source at a time)."""
    asked = [(k, source) for k in range(len(lines["en"])) for source in ("en", "fr")]

    async def run() -> list[str]:
        async with httpx.AsyncClient(timeout=60) as client:
            answers = await asyncio.gather(*(client.post(f"{server}/translate", json={
                "q": lines[source][k], "source": source, "target": "de"}) for k, source in asked))
        return [a.json()["translatedText"] for a in answers]

    expected = {source: mt_translate(lines[source], NLLB_CODES[source], NLLB_CODES["de"]) for source in ("en", "fr")}
    assert asyncio.run(run()) == [expected[source][k] for k, source in asked]


def test_the_table_maps_libretranslates_codes_to_nllbs():
    assert [LIBRETRANSLATE[code][0] for code in ("en", "de", "fr", "zh", "zt", "ar")] == [
        "eng_Latn", "deu_Latn", "fra_Latn", "zho_Hans", "zho_Hant", "arb_Arab"]
    floresish = [flores for flores, _ in LIBRETRANSLATE.values()]
    assert len(set(floresish)) == len(floresish)  # one way back
    assert [code for code in LIBRETRANSLATE if code not in LANGUAGES] == ["gl", "zt"]  # lingua knows the rest
    assert served_codes(["eng_Latn", "ace_Arab", "zho_Hant", "de"]) == {
        "eng_Latn": "en", "ace_Arab": "ace_Arab", "zho_Hant": "zt", "de": "de"}
    assert served_codes(["de", "deu_Latn"]) == {"de": "de", "deu_Latn": "deu_Latn"}  # one code, two languages
    languages = coded_languages("nllb", ["eng_Latn", "fra_Latn"], ["fra_Latn", "eng_Latn"], "fra_Latn")
    assert (languages.source, languages.sources, languages.targets) == ("fr", ("fr", "en"), ("fr", "en"))
    assert languages.hop("fr", "en").tag == "eng_Latn" and languages.hop("fr", "en").source_code == "fra_Latn"
    with pytest.raises(UserError, match="source language 'de' is not one of this model's: en, fr"):
        coded_languages("nllb", ["eng_Latn", "fra_Latn"], ["fra_Latn"], "de")
