"""scripts/bench_finetune.py --smoke: mt and transformers fine-tune the same (tiny) OPUS-MT-shaped model."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys

import pytest
from helpers import SCRIPTS

pytestmark = pytest.mark.filterwarnings("ignore:Recommended. pip install sacremoses")


def test_smoke_run_prints_the_ratio_last(tmp_path, multi30k_dir):
    pytest.importorskip("accelerate")
    results = tmp_path / "results.jsonl"
    env = {**os.environ, "PYTHONPATH": str(SCRIPTS.parent)}
    out = subprocess.run(
        [sys.executable, str(SCRIPTS / "bench_finetune.py"), "--smoke", "--work-dir", str(tmp_path / "work"),
         "--results", str(results), "--data-dir", str(multi30k_dir)],
        capture_output=True, text=True, env=env, check=True,
    ).stdout
    assert re.fullmatch(r"ratio finetune fp32: \d+\.\d\d", out.strip().splitlines()[-1])
    rows = [json.loads(line) for line in results.read_text().splitlines()]
    assert [r["engine"] for r in rows] == ["mt", "hf"] and all(r["tokens_per_s"] > 0 for r in rows)
    assert round(rows[0]["sentences_per_update"]) == round(rows[1]["sentences_per_update"])  # the same batches
