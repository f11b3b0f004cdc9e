"""Dynamic batching keeps answers exact: concurrent requests get mt-translate's output for their lines.

A trained demo model (shared with the export tests) serves many concurrent requests of 1-4 lines;
each answer must equal ``Translator.translate`` over all lines at once with the same settings, whatever
else was in the request's batch, and the worker must actually have merged requests.
"""

from __future__ import annotations

import asyncio
import dataclasses
import random

import httpx
import pytest
from export_helpers import demo_model
from serve_helpers import reference, serving, torch_engine

from mt.decode import Translator
from mt.decode.common import max_output_lengths
from mt.decode.translator import collate_sources
from mt.model.packed_linear import padded_rows
from mt.serve.app import create_app
from mt.serve.batching import GATHER_BATCHES
from mt.serve.engine import FILL_LONGEST, FORCED_LENGTH, Options, fill_lines, rows_per_line, source_row_batches
from mt.serve.settings import ServeSettings

REQUESTS = 24


@pytest.fixture(scope="module")
def demo(tmp_path_factory):
    return demo_model(tmp_path_factory.getbasetemp() / "export_demo")


@pytest.fixture(scope="module")
def engine(demo):
    return torch_engine(demo.ckpt)


def split_requests(lines: list[str], seed: int) -> list[list[str]]:
    rng, out, start = random.Random(seed), [], 0
    while start < len(lines):
        size = rng.randint(1, 4)
        out.append(lines[start : start + size])
        start += size
    return out


async def post_all(url: str, path: str, bodies: list[dict]) -> list[httpx.Response]:
    async with httpx.AsyncClient(timeout=60) as client:
        return await asyncio.gather(*(client.post(f"{url}{path}", json=b) for b in bodies))


def test_concurrent_requests_equal_the_offline_translation(demo, engine):
    lines = demo.sources[: REQUESTS * 2]
    requests = split_requests(lines, seed=0)
    expected = reference(engine, lines)
    with serving(engine, ServeSettings(threads=1, max_wait_ms=20)) as (url, app):
        answers = asyncio.run(post_all(url, "/translate", [{"q": r, "target": "de"} for r in requests]))
        metrics = httpx.get(f"{url}/metrics").text
    got = [line for a in answers for line in a.json()["translatedText"]]
    assert got == expected
    batches = float(next(m.split()[-1] for m in metrics.splitlines() if m.startswith("mt_batch_requests_count")))
    assert batches < len(requests)  # requests were merged


def test_mixed_options_are_batched_apart_and_stay_exact(demo, engine):
    lines = demo.sources[100:124]
    requests = split_requests(lines, seed=1)
    options = [Options(), Options(strategy="greedy"), Options(strategy="beam", beam=2, nbest=2)]
    bodies = []
    for i, r in enumerate(requests):
        o = options[i % 3]
        bodies.append({"q": r, **{k: v for k, v in vars(o).items() if v is not None}})
    with serving(engine, ServeSettings(threads=1, max_wait_ms=20)) as (url, _):
        answers = asyncio.run(post_all(url, "/v1/translate", bodies))
    for i, (r, a) in enumerate(zip(requests, answers, strict=True)):
        assert [t["text"] for t in a.json()["translations"]] == reference(engine, r, options[i % 3])


def test_one_request_at_a_time_gives_the_same_answers(demo, engine):
    lines = demo.sources[200:216]
    requests = split_requests(lines, seed=2)
    with serving(engine, ServeSettings(threads=1, max_batch_tokens=1)) as (url, app):
        answers = asyncio.run(post_all(url, "/translate", [{"q": r, "target": "de"} for r in requests]))
        metrics = httpx.get(f"{url}/metrics").text
    assert [line for a in answers for line in a.json()["translatedText"]] == reference(engine, lines)
    assert f"mt_batch_requests_bucket{{le=\"1.0\",model=\"en-de\"}} {float(len(requests))}" in metrics


def test_a_gather_holds_several_decoder_batches_by_default(engine):
    default = create_app(engine, ServeSettings(threads=1)).state.front.worker
    assert default.budget(engine) == GATHER_BATCHES * engine.settings(Options()).max_tokens > 0
    assert create_app(engine, ServeSettings(threads=1, max_batch_tokens=7)).state.front.worker.budget(engine) == 7


def test_the_fill_warm_up_decodes_the_largest_batch_at_the_length_limit(demo, engine):
    settings = engine.settings(Options())
    budget, rows, per_word = settings.max_tokens, rows_per_line(settings), max(1, engine.count_pieces("a"))
    lines = fill_lines(budget, rows, engine.max_src_len, per_word)
    assert [engine.count_pieces(line) for line in lines[:3]] == [per_word, 2 * per_word, 3 * per_word]
    assert max(engine.count_pieces(line) for line in lines) <= FILL_LONGEST
    cost = sum((engine.count_pieces(line) + 1) * rows for line in lines)
    assert cost <= budget < cost + (FILL_LONGEST + 1) * rows  # a longest line more would not fit
    t = engine.translator
    forced = Translator(t.model, t.tokenizers, dataclasses.replace(t.cfg, nbest=1, min_len=FORCED_LENGTH), "cpu",
                        max_positions=t.max_positions, max_src_len=t.max_src_len)
    sources = forced.encode_lines(lines[:5])
    limits = max_output_lengths(collate_sources(sources, "cpu")[1], t.cfg.max_len_a, t.cfg.max_len_b, t.max_positions)
    assert [len(x.hypotheses[0].tokens) for x in forced.translate_nbest(lines[:5])] == limits  # EOS only at the limit
    before = reference(engine, demo.sources[:8])
    assert engine.fill(10 * budget) == min(len(lines), settings.max_sentences)  # one decoder batch at most
    assert reference(engine, demo.sources[:8]) == before  # the warm-up leaves no state behind


def test_fill_lines_fit_a_small_budget_and_the_model_limit():
    assert fill_lines(1, 4, None) == ["a"]  # always one line, even over the budget
    assert fill_lines(100, 1, 5, pieces_per_word=2)[:4] == ["a", "a a", "a", "a a"]  # 2 words: 4 of 5 pieces
    # (words + EOS) x 1 row: 2 + 3 + 4 a round; 3 rounds and a 1-word line cost 29, a 2-word line more would be 32
    assert [len(line.split()) for line in fill_lines(30, 1, 3)] == [1, 2, 3, 1, 2, 3, 1, 2, 3, 1]


def test_the_fill_warm_up_meets_every_padded_source_row_count(engine):
    settings = engine.settings(Options())
    max_rows = settings.max_tokens // rows_per_line(settings)
    seen: list[int] = []
    encoder = engine.translator.model.encoder
    hook = encoder.register_forward_hook(lambda module, args, out: seen.append(out.shape[0] * out.shape[1]))  # B x S
    try:
        engine.fill(settings.max_tokens)
    finally:
        hook.remove()
    sizes = {padded_rows(rows) for rows in range(1, max_rows + 1)}
    assert sizes <= {padded_rows(rows) for rows in seen}  # (B, S) encoder batches at every size a decoder batch meets


def test_source_row_batches_reach_each_padded_size_once():
    lengths = list(range(2, 66))  # 1-64 pieces + EOS
    pairs = source_row_batches(2000, 64, lengths)
    sizes = sorted({padded_rows(rows) for rows in range(1, 2001)})
    assert [padded_rows(b * s) for b, s in pairs] == sizes  # one batch a size, in order
    assert all(b <= 64 and b * s <= 2000 for b, s in pairs)  # each fits one decoder batch
    assert source_row_batches(20, 64, [5]) == [(1, 5), (3, 5), (4, 5)]  # size 24: 20 rows, all a decoder batch holds
    assert source_row_batches(100, 2, [10]) == [(1, 10), (2, 10)]  # 8 is under one line, 32 and up over 2 sentences
