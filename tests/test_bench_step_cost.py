"""scripts/bench_step_cost.py: the split of a step's cost, its argument checks, and a --smoke run end to end."""

from __future__ import annotations

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
    with script_with_siblings("bench_step_cost", ("bench_ct2", "bench_peers", "bench_decode_peers")) as script:
        yield script


def test_split_cost_is_the_one_row_step_and_the_slope_to_the_most_rows(bench):
    one, per_row = bench.split_cost({1: 1.5, 4: 1.8, 16: 2.2, 64: 5.28})
    assert one == 1.5
    assert per_row == pytest.approx(60.0)  # (5.28 - 1.5) ms over 63 rows, in us


@pytest.mark.parametrize("rows", [["4", "16"], ["1"], ["1", "16", "4"]])
def test_rows_must_rise_from_one(rows: list[str]):
    out = subprocess.run([sys.executable, str(SCRIPTS / "bench_step_cost.py"), "--rows", *rows],
                         capture_output=True, text=True)
    assert out.returncode == 2
    assert "--rows must rise from 1 with at least two counts" in out.stderr


def test_smoke_run_prints_both_engines_split_last(tmp_path, multi30k_dir):
    pytest.importorskip("ctranslate2")
    ckpt = untrained_checkpoint(tmp_path / "mini.pt")
    out = subprocess.run(
        [sys.executable, str(SCRIPTS / "bench_step_cost.py"), "--smoke", "--ckpt-mini", str(ckpt),
         "--work-dir", str(tmp_path / "work"), "--data-dir", str(multi30k_dir), "--threads", "1"],
        capture_output=True, text=True, env={**os.environ, "PYTHONPATH": str(REPO)}, check=True,
    ).stdout
    assert re.search(r"round 1 mt  ms/step: 1 rows +\d+\.\d{3}  2 rows +\d+\.\d{3}  \(pieces \[3\]\)", out)
    assert re.search(r"round 1 ct2 ms/step: 1 rows +\d+\.\d{3}  2 rows +\d+\.\d{3}  \(pieces \[3\]\)", out)
    last = out.strip().splitlines()[-2:]
    assert re.fullmatch(r"one-row step mt: \d+\.\d{3} ms, ct2: \d+\.\d{3} ms", last[0])
    assert re.fullmatch(r"each further row mt: -?\d+\.\d us, ct2: -?\d+\.\d us", last[1])
