"""mt-serve's API on an untrained tiny model: LibreTranslate's shapes, /v1/translate, /health, /metrics, limits.

The answers are compared with ``Translator.translate`` (what mt-translate runs) for the same lines and
settings; the model is untrained, so only the plumbing is under test here (test_serve_batching uses a
trained one).
"""

from __future__ import annotations

import json

import httpx
import pytest
from export_helpers import demo_sources, untrained_checkpoint
from serve_helpers import reference, serving, torch_engine

from mt.serve.engine import Options
from mt.serve.settings import ServeSettings

LINES = demo_sources(6)
MULTIPART_FF = (
    b'--XX\r\nContent-Disposition: form-data; name="q"\r\n\r\n\xff\xfe\r\n'
    b'--XX\r\nContent-Disposition: form-data; name="target"\r\n\r\nde\r\n--XX--\r\n'
)


@pytest.fixture(scope="module")
def ckpt(tmp_path_factory):
    return untrained_checkpoint(tmp_path_factory.mktemp("serve_api") / "untrained.pt")


@pytest.fixture(scope="module")
def engine(ckpt):
    return torch_engine(ckpt, strategy="greedy", max_len_b=6)


@pytest.fixture(scope="module")
def server(engine):
    settings = ServeSettings(threads=1, max_lines=8, max_body_bytes=200_000)
    with serving(engine, settings) as (url, app):
        yield url


def post(url: str, path: str, **kwargs) -> httpx.Response:
    return httpx.post(f"{url}{path}", timeout=30, **kwargs)


def test_libretranslate_json_string_and_list(server, engine):
    expected = reference(engine, LINES[:3])
    one = post(server, "/translate", json={"q": LINES[0], "source": "en", "target": "de"})
    assert one.status_code == 200 and one.json() == {"translatedText": expected[0]}
    many = post(server, "/translate", json={"q": LINES[:3], "source": "auto", "target": "de"})
    assert many.json()["translatedText"] == expected
    assert many.json()["detectedLanguage"] == [{"confidence": 100.0, "language": "en"}] * 3


def test_a_string_of_lines_is_translated_line_by_line(server, engine):
    text = "\n".join([LINES[0], "", " " + LINES[1] + "\r"])
    answer = post(server, "/translate", json={"q": text, "source": "en", "target": "de"}).json()
    first, second = reference(engine, [LINES[0], LINES[1]])
    assert answer["translatedText"] == f"{first}\n\n {second}\r"  # every separator kept as it was


def test_libretranslate_form_multipart_and_query(server, engine):
    expected = reference(engine, [LINES[2]])[0]
    form = post(server, "/translate", data={"q": LINES[2], "source": "en", "target": "de"})
    multipart = post(server, "/translate", files={"q": (None, LINES[2]), "target": (None, "de")})
    query = post(server, "/translate", params={"q": LINES[2], "source": "en", "target": "de"})
    for response in (form, multipart, query):
        assert response.status_code == 200, response.text
        assert response.json()["translatedText"] == expected


def test_languages_and_health(server):
    assert httpx.get(f"{server}/languages").json() == [
        {"code": "en", "name": "English", "targets": ["de"]},
        {"code": "de", "name": "German", "targets": []},
    ]
    assert httpx.get(f"{server}/health").json() == {"status": "ok"}


def test_v1_translate_options_nbest_and_scores(server, engine):
    options = Options(strategy="beam", beam=3, nbest=2)
    answer = post(server, "/v1/translate", json={"q": LINES[:2], "strategy": "beam", "beam": 3, "nbest": 2,
                                                 "scores": True}).json()
    assert [t["text"] for t in answer["translations"]] == reference(engine, LINES[:2], options)
    for line in answer["translations"]:
        assert len(line["nbest"]) == 2 and line["nbest"][0] == {"text": line["text"], "score": line["score"]}
        assert line["nbest"][0]["score"] >= line["nbest"][1]["score"]
    assert answer["settings"]["beam"] == 3 and answer["settings"]["nbest"] == 2


@pytest.mark.parametrize(
    ("kwargs", "status", "message"),
    [
        ({"content": b'{"q": "one",', "headers": {"content-type": "application/json"}}, 400, "malformed JSON"),
        ({"json": ["q"]}, 400, "must be an object"),
        ({"content": b"[" * 100_000, "headers": {"content-type": "application/json"}}, 400, "nested too deeply"),
        ({"json": {"q": 5, "target": "de"}}, 400, "q must be a string or a list of strings"),
        ({"json": {"q": ["a", 1], "target": "de"}}, 400, "q must be a string or a list of strings"),
        ({"json": {"q": "", "target": "de"}}, 400, "missing q parameter"),
        ({"json": {"q": [], "target": "de"}}, 400, "missing q parameter"),
        ({"json": {"target": "de"}}, 400, "missing q parameter"),
        ({"json": {"q": "one"}}, 400, "missing target parameter"),
        ({"json": {"q": "one", "target": 7}}, 400, "target must be a string"),
        ({"json": {"q": "one", "target": "fr"}}, 400, "fr is not supported"),
        ({"json": {"q": "one", "source": "cs", "target": "de"}}, 400, "cs is not supported"),
        ({"json": {"q": "one", "target": "de", "format": "xml"}}, 400, "format xml is not supported"),
        ({"json": {"q": "\n".join(["one"] * 9), "target": "de"}}, 400, "9 sentences in one request, more than"),
        ({"json": {"q": "one", "target": "de", "alternatives": -1}}, 400, "alternatives must be a whole number"),
        ({"json": {"q": "one", "target": "de", "alternatives": 99}}, 400, "alternatives must be a whole number"),
        ({"content": b'{"q": "\xff", "target": "de"}', "headers": {"content-type": "application/json"}}, 400,
         "not valid UTF-8"),
        ({"content": b'{"q": "\\ud800", "target": "de"}', "headers": {"content-type": "application/json"}}, 400,
         "lone surrogate"),
        ({"content": b"q=%ff&target=de", "headers": {"content-type": "application/x-www-form-urlencoded"}}, 400,
         "not valid UTF-8"),
        ({"content": MULTIPART_FF, "headers": {"content-type": "multipart/form-data; boundary=XX"}}, 400,
         "form field q is not valid UTF-8"),
        ({"content": b"q=one", "headers": {"content-type": "multipart/form-data"}}, 400, "malformed multipart"),
        ({"files": {"q": ("a.txt", b"one"), "target": (None, "de")}}, 400, "q must be a text field, not a file"),
        ({"json": {"q": "x" * 200_000, "target": "de"}}, 413, "over --max-body-bytes 200000"),
    ],
    ids=lambda v: v if isinstance(v, str) else None,
)
def test_bad_requests_get_a_clear_json_error(server, kwargs, status, message):
    response = post(server, "/translate", **kwargs)
    assert response.status_code == status, response.text
    assert message in response.json()["error"]


def test_a_streamed_body_over_the_limit_is_refused_without_content_length(server):
    def chunks():
        for _ in range(30):
            yield b"x" * 10_000

    response = post(server, "/translate", content=chunks(), headers={"content-type": "application/json"})
    assert response.status_code == 413 and "max-body-bytes" in response.json()["error"]


@pytest.mark.parametrize(
    ("body", "message"),
    [
        ({"q": "one", "beam": 0}, "beam"),
        ({"q": "one", "strategy": "best"}, "strategy"),
        ({"q": "one", "beam": 2, "nbest": 3}, "decode.nbest=3: must be in [1, decode.beam_size=2]"),
        ({"q": "one", "strategy": "beam", "beam": 17}, "more than --max-beam 16"),
        ({"q": "one", "alpha": "high"}, "alpha"),
        ({"q": "one", "unknown": 1}, "unknown"),
        ({"q": "one", "target": "fr"}, "fr is not supported"),
        ({"q": [], "beam": 2}, "missing q parameter"),
    ],
)
def test_v1_bad_options_are_400(server, body, message):
    response = post(server, "/v1/translate", json=body)
    assert response.status_code == 400 and message in response.json()["error"], response.text


def test_unknown_route_and_method_answer_json_errors(server):
    assert httpx.get(f"{server}/nowhere").json() == {"error": "Not Found"}
    assert httpx.get(f"{server}/translate").status_code == 405


def test_metrics_count_requests_errors_and_batches(server):
    post(server, "/translate", json={"q": LINES[:2], "target": "de"})
    post(server, "/translate", json={"q": "one", "target": "xx"})
    text = httpx.get(f"{server}/metrics").text
    assert 'mt_requests_total{code="200",route="/translate"}' in text
    assert 'mt_errors_total{code="400",route="/translate"}' in text
    for name in ("mt_request_seconds_bucket", "mt_batch_sentences_bucket", "mt_queue_depth_bucket",
                 "mt_sentences_translated_total", "mt_source_tokens_total", "mt_target_tokens_total"):
        assert name in text


def test_openapi_schema_docs_and_page(server):
    schema = httpx.get(f"{server}/openapi.json").json()
    assert {"/translate", "/v1/translate", "/languages", "/health", "/metrics"} <= set(schema["paths"])
    assert "swagger" in httpx.get(f"{server}/docs").text.lower()
    page = httpx.get(f"{server}/")
    assert page.status_code == 200 and "<textarea" in page.text


@pytest.fixture(scope="module")
def strict_server(ckpt, tmp_path_factory):
    """Too-long lines rejected (a 5-piece limit), and API keys required."""
    keys = tmp_path_factory.mktemp("keys") / "keys.txt"
    keys.write_text("# comment\nsecret-one\nsecret-two\n")
    from mt.serve.limits import load_api_keys

    engine = torch_engine(ckpt, strategy="greedy", max_len_b=4, on_too_long="reject")
    engine.translator.max_src_len = 5
    with serving(engine, ServeSettings(threads=1, api_keys=load_api_keys(keys))) as (url, app):
        yield url


def test_api_keys(strict_server):
    body = {"q": "one", "target": "de"}
    assert post(strict_server, "/translate", json=body).status_code == 403
    wrong = post(strict_server, "/translate", json={**body, "api_key": "secret"})
    assert wrong.status_code == 403 and wrong.json() == {"error": "Invalid API key"}
    assert post(strict_server, "/translate", json={**body, "api_key": "secret-two"}).status_code == 200
    assert post(strict_server, "/translate", data={**body, "api_key": "secret-one"}).status_code == 200
    assert post(strict_server, "/v1/translate", json={"q": "one"}).status_code == 403


def test_a_sentence_over_the_limit_is_cut_and_every_piece_translated(strict_server):
    """With the model's 5-piece limit a long line is cut at word boundaries into sentences that fit, never
    rejected or truncated (--on-too-long is mt-translate's, for lines it does not split)."""
    long_line = " ".join(LINES[:4])
    body = {"q": ["one", long_line], "target": "de", "api_key": "secret-one"}
    response = post(strict_server, "/v1/translate", json=body | {"scores": True})
    assert response.status_code == 200, response.text
    assert all(t["text"] for t in response.json()["translations"])


def test_errors_never_leak_the_api_key_into_the_body(strict_server):
    response = post(strict_server, "/translate", json={"q": 5, "target": "de", "api_key": "secret-one"})
    assert "secret" not in json.dumps(response.json())


def test_alternatives_in_libretranslates_shape(server):
    one = post(server, "/translate", json={"q": LINES[0], "target": "de", "alternatives": 2}).json()
    assert isinstance(one["alternatives"], list) and len(one["alternatives"]) <= 2
    alternatives = one["alternatives"]
    assert one["translatedText"] not in alternatives and len(set(alternatives)) == len(alternatives)
    many = post(server, "/translate", json={"q": LINES[:2], "target": "de", "alternatives": 1}).json()
    assert len(many["alternatives"]) == 2 and all(isinstance(a, list) for a in many["alternatives"])
    form = post(server, "/translate", data={"q": LINES[0], "target": "de", "alternatives": "2"}).json()
    assert form["alternatives"] == one["alternatives"]
    html = post(server, "/translate", json={"q": f"<p>{LINES[0]}</p>", "target": "de", "format": "html",
                                            "alternatives": 2}).json()
    assert html["alternatives"] == []  # as LibreTranslate: alternatives are for text


def test_html_keeps_the_markup_and_recovers_broken_markup(server):
    answer = post(server, "/translate", json={"q": f'<p title="{LINES[1]}">{LINES[0]} <b>{LINES[2]}</b></p>',
                                              "target": "de", "format": "html"})
    assert answer.status_code == 200
    text = answer.json()["translatedText"]
    assert text.startswith("<p title=") and "<b>" in text and text.endswith("</p>")
    broken = post(server, "/translate", json={"q": f"<p>{LINES[0]} <b>{LINES[1]}", "target": "de", "format": "html"})
    assert broken.status_code == 200 and "<b>" in broken.json()["translatedText"]


def test_v1_translate_splits_sentences_unless_told_not_to(server, engine):
    text = f"{LINES[0]}. {LINES[1]}."
    split = post(server, "/v1/translate", json={"q": text}).json()["translations"][0]["text"]
    assert split == " ".join(reference(engine, [f"{LINES[0]}.", f"{LINES[1]}."]))
    whole = post(server, "/v1/translate", json={"q": text, "split_sentences": False}).json()["translations"][0]["text"]
    assert whole == reference(engine, [text])[0]
