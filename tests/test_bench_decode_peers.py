"""scripts/bench_decode_peers.py: its pure parts, and a --smoke run end to end (mt and CTranslate2 workers)."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys

import pytest
from export_helpers import untrained_checkpoint
from helpers import SCRIPTS, script_with_siblings

REPO = SCRIPTS.parent


@pytest.fixture(scope="module")
def bench():
    with script_with_siblings("bench_decode_peers", ("bench_ct2", "bench_peers")) as script:
        yield script


def test_ratio_lines_are_mt_over_ctranslate2_per_model_and_search(bench):
    medians = {("mini", "mt", "beam"): 300.0, ("mini", "ct2", "beam"): 400.0, ("mini", "mt", "greedy"): 900.0,
               ("mini", "ct2", "greedy"): 600.0, ("base", "mt", "beam"): 5.0, ("base", "ct2", "beam"): 4.0,
               ("base", "mt", "greedy"): 20.0, ("base", "ct2", "greedy"): 30.0}
    assert bench.ratio_lines(medians, 4, ["mini", "base"]) == [
        "ratio beam4 mini: 0.75", "ratio greedy mini: 1.50", "ratio beam4 base: 1.25", "ratio greedy base: 0.67"]


def test_pair_ratios_set_each_mt_run_against_the_ctranslate2_run_of_its_pair(bench):
    def run(pair, engine, beam, greedy):
        return {"pair": pair, "model": "mini", "engine": engine,
                "figures": {"beam": {"sentences_per_s": beam}, "greedy": {"sentences_per_s": greedy}}}

    runs = [run(1, "mt", 400.0, 1000.0), run(1, "ct2", 380.0, 1050.0), run(2, "mt", 300.0, 700.0),
            run(2, "ct2", 270.0, 650.0), run(3, "mt", 310.0, 800.0), run(3, "ct2", 380.0, 1000.0)]
    assert bench.pair_ratio_lines(runs, ["mini"]) == [
        "pair by pair beam mini: 1.05 1.11 0.82 (median 1.05)",
        "pair by pair greedy mini: 0.95 1.08 0.80 (median 0.95)",
    ]


def test_limits_are_mts_per_sentence_limits(bench):
    spec = {"max_len_a": 1.0, "max_len_b": 50, "max_positions": 64}
    assert bench.limits_of([0, 3, 20], spec) == [50, 53, 63]  # floor(a * n + b), at most max_positions - 1
    assert bench.limits_of([7], {"max_len_a": 0.0, "max_len_b": 40, "max_positions": 1024}) == [40]


def test_same_outputs_compares_the_last_pair(bench):
    def run(engine, texts):
        return {"engine": engine, "figures": {"beam": {"texts": texts}}}

    runs = [run("mt", ["a", "b"]), run("ct2", ["x", "y"]), run("mt", ["a", "b", "c"]), run("ct2", ["a", "z", "c"])]
    assert bench.same_outputs(runs, "beam") == (2, 3)


def test_smoke_run_prints_the_four_ratios_last(tmp_path, multi30k_dir):
    pytest.importorskip("ctranslate2")
    ckpt = untrained_checkpoint(tmp_path / "mini.pt", "decode.max_len_a=0", "decode.max_len_b=6")
    results = tmp_path / "results.jsonl"
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    out = subprocess.run(
        [sys.executable, str(SCRIPTS / "bench_decode_peers.py"), "--smoke", "--ckpt-mini", str(ckpt),
         "--work-dir", str(tmp_path / "work"), "--results", str(results), "--data-dir", str(multi30k_dir),
         "--threads", "2", "--ct2-inter", "2", "--mt-workers", "2"],  # both engines: 2 at a time, 1 thread each
        capture_output=True, text=True, env=env, check=True,
    ).stdout
    last = out.strip().splitlines()[-6:]
    assert [line.split(":")[0] for line in last] == [
        "ratio beam4 mini", "ratio greedy mini", "ratio beam4 base", "ratio greedy base", "ratio beam4 opus",
        "ratio greedy opus"]
    assert all(re.fullmatch(r"ratio \w+ \w+: \d+\.\d\d", line) for line in last)
    assert re.search(r"mini beam: \d+/8 of mt's outputs equal CTranslate2's", out)
    assert "(pieces 5-5, mean 5.0" in out  # the base model: exactly --base-pieces pieces on both sides
    assert "(CTranslate2 float32, 2 batches at a time)" in out and "(mt 2 decoding processes)" in out
    rows = [json.loads(line) for line in results.read_text().splitlines()]
    assert [(r["model"], r["engine"]) for r in rows] == [
        ("mini", "mt"), ("mini", "ct2"), ("base", "mt"), ("base", "ct2"), ("opus", "mt"), ("opus", "ct2")]
    assert "opus mt  beam  " in out and out.count("(pieces 5-5, mean 5.0") == 8  # base and opus, both engines
    assert {r["ct2_inter"] for r in rows} == {r["mt_workers"] for r in rows} == {2}
    assert all(r[search]["cpu_s"] > 0 for r in rows for search in ("beam", "greedy"))


@pytest.mark.parametrize("flag", ["--ct2-inter", "--mt-workers"])
def test_engines_run_at_most_threads_batches_at_a_time(flag: str):
    out = subprocess.run(
        [sys.executable, str(SCRIPTS / "bench_decode_peers.py"), "--threads", "2", flag, "3"],
        capture_output=True, text=True,
    )
    assert out.returncode == 2
    assert f"{flag} must be between 1 and --threads (2), got 3" in out.stderr



def test_the_benchmarks_checkpoints_are_one_papers_model_whatever_the_preset_trains(tmp_path, monkeypatch):
    # regression: the preset's two 6+6 members leaked into the benchmarks' checkpoints (runs/<name>/member_k)
    from mt.config import compose

    commands = []
    monkeypatch.setattr(subprocess, "run", lambda command, **_: commands.append(command))
    with script_with_siblings("bench", ()) as bench:
        monkeypatch.setattr(bench, "REPO", tmp_path)
        path = bench.train_once("bench_x", 1000, tmp_path / "data", ["train.validate_every=1000"], "a checkpoint")
    assert path == tmp_path / "runs" / "bench_x" / "checkpoints" / "checkpoint_1000.pt"
    cfg = compose(commands[0][3:])  # [python, -m, mt.train, overrides...]
    assert (cfg.model.encoder_layers, cfg.model.decoder_layers, cfg.model.pre_ln, cfg.train.members) == (4, 4, False, 1)
