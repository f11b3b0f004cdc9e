"""scripts/bench_native_step.py: the ATen calls from C++ give the Python step's logits bit for bit (Post-LN and
Pre-LN), mt's C++ step the same tokens, and it refuses what the ATen copy does not cover."""

from __future__ import annotations

import os
import re
import subprocess
import sys

import pytest
from export_helpers import untrained_checkpoint
from helpers import SCRIPTS

REPO = SCRIPTS.parent


def run_script(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, str(SCRIPTS / "bench_native_step.py"), *args], capture_output=True,
                          text=True, env={**os.environ, "PYTHONPATH": str(REPO)})


@pytest.mark.parametrize("placement", ["model.pre_ln=false", "model.pre_ln=true"])
def test_smoke_run_gives_the_python_steps_logits_bit_for_bit(tmp_path, multi30k_dir, placement):
    ckpt = untrained_checkpoint(tmp_path / "mini.pt", placement)
    out = run_script("--smoke", "--ckpt", str(ckpt), "--data-dir", str(multi30k_dir), "--threads", "1")
    assert out.returncode == 0, out.stderr
    for rows in (1, 2):
        line = (rf"rows +{rows}: python \d+\.\d{{3}}  aten \d+\.\d{{3}}  native \d+\.\d{{3}} .*"
                r"aten bit-equal: True, native max \|diff\|: [0-9.e-]+, native other tokens: 0")
        assert re.search(line, out.stdout), out.stdout


def test_a_model_the_cpp_step_does_not_cover_is_refused_by_name(tmp_path, multi30k_dir):
    ckpt = untrained_checkpoint(tmp_path / "rope.pt", "model.positions=rope")
    out = run_script("--smoke", "--ckpt", str(ckpt), "--data-dir", str(multi30k_dir))
    assert out.returncode == 1
    assert out.stderr.strip().endswith("the C++ step does not cover model.positions=rope")
