"""Checkpoint averaging: the plain mean of the weights, computed one checkpoint at a time."""

import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from mt import checkpoint as ckpt

REPO = Path(__file__).resolve().parents[1]
MIB = 1 << 20


def _state(seed: int) -> dict:
    g = torch.Generator().manual_seed(seed)
    model = {
        "enc.weight": torch.randn(6, 5, generator=g),
        "dec.bias": torch.randn(5, generator=g).to(torch.bfloat16),
        "steps": torch.tensor([seed]),  # a non-float buffer: taken from the last checkpoint
    }
    return {
        "model": model,
        "optimizer": {"state": {0: {"exp_avg": torch.randn(6, 5, generator=g)}}},
        "scaler": {"scale": 1024.0},
        "train_state": {"step": seed},
        "rng": [{"torch": torch.get_rng_state()}],
        "config": {"name": "x"},
    }


def test_average_equals_the_plain_mean_and_keeps_the_last_state(tmp_path):
    states = [_state(seed) for seed in (1, 2, 3)]
    paths = [ckpt.save_checkpoint(tmp_path / f"checkpoint_{i}.pt", s) for i, s in enumerate(states, 1)]
    avg = ckpt.average_checkpoints(paths)
    mean = torch.stack([s["model"]["enc.weight"] for s in states]).mean(0)
    assert torch.allclose(avg["model"]["enc.weight"], mean, atol=1e-6)
    bias = torch.stack([s["model"]["dec.bias"].float() for s in states]).mean(0)
    assert avg["model"]["dec.bias"].dtype == torch.bfloat16
    assert torch.allclose(avg["model"]["dec.bias"].float(), bias, atol=1e-2)
    assert torch.equal(avg["model"]["steps"], torch.tensor([3]))
    assert list(avg["model"]) == list(states[-1]["model"])
    assert avg["train_state"] == {"step": 3} and "optimizer" not in avg and "scaler" not in avg
    assert avg["averaged_from"] == [str(p) for p in paths]
    again = ckpt.load_checkpoint(ckpt.save_checkpoint(tmp_path / "averaged.pt", avg))
    assert torch.equal(again["model"]["enc.weight"], avg["model"]["enc.weight"])


def test_averaging_checkpoints_of_different_models_names_the_weight(tmp_path):
    a = ckpt.save_checkpoint(tmp_path / "checkpoint_1.pt", _state(1))
    other = _state(2)
    other["model"]["enc.weight"] = torch.zeros(7, 5)
    b = ckpt.save_checkpoint(tmp_path / "checkpoint_2.pt", other)
    with pytest.raises(ckpt.CheckpointError, match=r"enc\.weight is \(7, 5\) there, \(6, 5\) in the first"):
        ckpt.average_checkpoints([a, b])
    del other["model"]["enc.weight"]
    c = ckpt.save_checkpoint(tmp_path / "checkpoint_3.pt", other)
    with pytest.raises(ckpt.CheckpointError, match=r"enc\.weight is missing from checkpoint_3\.pt"):
        ckpt.average_checkpoints([a, c])


# Peak RSS is read as VmHWM: ru_maxrss would start from the parent's peak (Linux keeps it across
# fork and exec), hiding any growth below the pytest process's own size.
CHILD = """
import sys, torch
from pathlib import Path
from mt import checkpoint as ckpt

def status(field):
    for line in open("/proc/self/status"):
        if line.startswith(field + ":"):
            return int(line.split()[1]) * 1024

mode, paths = sys.argv[1], [Path(p) for p in sys.argv[2:]]
before = status("VmRSS")
if mode == "stream":
    avg = ckpt.average_checkpoints(paths)["model"]
else:  # what averaging did before: every checkpoint in memory at once
    states = [ckpt.load_checkpoint(p) for p in paths]
    avg = {k: sum(s["model"][k] for s in states) / len(states) for k in states[0]["model"]}
assert all(torch.isfinite(v).all() for v in avg.values())
print(status("VmHWM") - before)
"""


def _peak_growth(mode: str, paths: list[Path]) -> int:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(REPO), os.environ.get("PYTHONPATH", "")]),
           "OMP_NUM_THREADS": "1"}
    out = subprocess.run([sys.executable, "-c", CHILD, mode, *map(str, paths)], env=env, cwd=REPO,
                         capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr[-2000:]
    return int(out.stdout.split()[-1])


def test_averaging_streams_peak_memory_stays_near_two_copies_of_the_weights(tmp_path):
    n, rows = 8, 1024
    base = torch.randn(4, rows, rows)  # 16 MiB of float32 weights per checkpoint
    weight_bytes = base.numel() * 4
    paths = []
    for i in range(n):
        model = {f"layer{j}.weight": base[j] + i for j in range(4)}
        fake_adam = {"state": {j: {"exp_avg": base[j] * 0.1, "exp_avg_sq": base[j] * 0.01} for j in range(4)}}
        state = {"model": model, "optimizer": fake_adam, "config": {"name": "x"}}
        paths.append(ckpt.save_checkpoint(tmp_path / f"checkpoint_{i}.pt", state))
    del base, model, fake_adam, state

    streamed = _peak_growth("stream", paths)
    loaded_all = _peak_growth("all", paths)
    assert streamed < 3 * weight_bytes, f"streaming grew {streamed / MIB:.0f} MiB for {weight_bytes / MIB:.0f} MiB"
    assert loaded_all > n * weight_bytes  # the measurement sees the old way's cost
