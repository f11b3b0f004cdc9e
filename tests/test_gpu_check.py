"""scripts/gpu_check.py where there is no GPU (this machine, CI): it says so and exits 0; its report's layout."""

from __future__ import annotations

import json

import pytest
import torch
from helpers import load_script


@pytest.fixture(scope="module")
def gpu_check():
    return load_script("gpu_check")


@pytest.mark.skipif(torch.cuda.is_available(), reason="the path of a machine without a GPU")
def test_without_cuda_it_says_so_and_exits_0(gpu_check, capsys, tmp_path):
    assert gpu_check.main(["--out", str(tmp_path / "report")]) == 0
    out = capsys.readouterr().out
    assert out.startswith(f"gpu-check: no CUDA device is visible to torch {torch.__version__}")
    assert not (tmp_path / "report").exists()


def test_the_report_holds_each_step_its_figures_and_a_failures_output(gpu_check, tmp_path):
    device = {"name": "NVIDIA H100 80GB HBM3", "memory_gib": 79.2}
    steps = [
        {"step": "CUDA tests", "ok": True, "seconds": 80.0, "summary": ["7 passed in 79.1s"], "output": "..."},
        {"step": "training throughput", "ok": False, "figures": {"fp32": {"tokens_per_s": 51234}},
         "output": {"fp16": "RuntimeError: out of memory"}},
    ]
    gpu_check.write_report(tmp_path, device, steps)
    report = (tmp_path / "report.md").read_text()
    assert "## CUDA tests: ok" in report and "- 7 passed in 79.1s" in report
    assert "## training throughput: FAILED" in report and '- fp32: {"tokens_per_s": 51234}' in report
    assert "fp16:\nRuntimeError: out of memory" in report
    assert json.loads((tmp_path / "report.json").read_text())["steps"][1]["figures"]["fp32"]["tokens_per_s"] == 51234


def test_a_step_past_its_time_is_stopped_and_says_so(gpu_check):
    code, output, seconds = gpu_check.run_step(["python3", "-c", "import time; print('started', flush=True); "
                                                "time.sleep(30)"], 2)
    assert code == 124 and "(stopped after 2 s)" in output and seconds < 20


def test_the_decoding_step_runs_its_figures_on_any_device(gpu_check, tmp_path):
    """Step 3's code on the CPU (the GPU's path but the device), on a random model: each strategy's speed and
    agreement, and CTranslate2 saying it sees no GPU."""
    from export_helpers import untrained_checkpoint

    ckpt = untrained_checkpoint(tmp_path / "model.pt", "decode.max_len_a=0", "decode.max_len_b=8")
    figures = gpu_check.decode_figures(ckpt, "cpu", limit=24)
    assert figures["lines"] == 24 and figures["greedy lines equal"] == figures["beam lines equal"] == 24
    assert figures["greedy cpu sentences/s"] > 0 and figures["beam cpu sentences/s"] > 0
    if not torch.cuda.is_available():
        assert figures["ctranslate2"].endswith("sees no GPU")
