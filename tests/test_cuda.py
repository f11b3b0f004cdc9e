"""The device branches of mt on a GPU (``-m cuda``; skipped where torch sees none): training steps in fp16 and
bf16 against fp32, decoding on the GPU against the CPU's, checkpoints moving between devices, the CUDA random
state in a checkpoint. ``make gpu-check`` runs these first (scripts/gpu_check.py)."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import pytest
import torch
from export_helpers import demo_model
from helpers import tiny_config

from mt.checkpoint import load_for_inference
from mt.decode import Translator
from mt.train.loop import train
from mt.train.state import rng_state, set_rng_state

pytestmark = [pytest.mark.cuda, pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a GPU")]

UPDATES = 40


def losses(run_dir: Path) -> dict[int, float]:
    rows = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
    return {row["step"]: row["loss"] for row in rows if row["split"] == "train"}


def run(tmp: Path, name: str, *overrides: str) -> Path:
    cfg = tiny_config(tmp / name, f"train.max_updates={UPDATES}", f"train.save_every={UPDATES}", *overrides)
    train(cfg)
    return Path(cfg.train.run_dir)


@pytest.mark.parametrize("precision", ["bf16", "fp16"])
def test_reduced_precision_training_follows_fp32_on_the_gpu(tmp_path, precision):
    """The same run (seed, data, updates) in fp32 and in ``precision`` on the GPU: losses within 2% at every
    logged update, and falling (fp16 with its loss scaler, bf16 under autocast)."""
    fp32 = losses(run(tmp_path, "fp32", "train.device=cuda", "train.precision=fp32"))
    reduced = losses(run(tmp_path, precision, "train.device=cuda", f"train.precision={precision}"))
    assert sorted(fp32) == sorted(reduced) and len(fp32) >= UPDATES // 2
    for step in fp32:
        assert abs(reduced[step] - fp32[step]) <= 0.02 * fp32[step], (step, fp32[step], reduced[step])
    assert reduced[max(reduced)] < reduced[min(reduced)] - 0.5


def test_the_gpu_trains_as_the_cpu_does(tmp_path):
    """fp32 on the GPU against fp32 on the CPU: the same losses within 1e-3 relative at every logged update."""
    cpu = losses(run(tmp_path, "cpu", "train.device=cpu"))
    gpu = losses(run(tmp_path, "gpu", "train.device=cuda"))
    assert sorted(cpu) == sorted(gpu)
    assert all(abs(gpu[s] - cpu[s]) <= 1e-3 * cpu[s] for s in cpu), {s: (cpu[s], gpu[s]) for s in cpu}


@pytest.mark.parametrize("strategy", ["greedy", "beam"])
def test_decoding_on_the_gpu_equals_the_cpu(tmp_path_factory, strategy):
    """The demo model (trained on the CPU) translates its 300 test lines on the GPU as on the CPU (which runs
    the C++ search; the GPU the Python one): at most 1% of lines differ, each by a near-tie."""
    demo = demo_model(tmp_path_factory.getbasetemp() / "export_demo")
    outputs = {}
    for device in ("cpu", "cuda"):
        model, tokenizers, cfg = load_for_inference(demo.ckpt, device)
        settings = dataclasses.replace(cfg.decode, strategy=strategy, beam_size=4 if strategy == "beam" else 1)
        translator = Translator(model, tokenizers, settings, device, max_positions=cfg.model.max_positions)
        outputs[device] = [t.hypotheses[0] for t in translator.translate_nbest(demo.sources)]
    differ = [i for i, (a, b) in enumerate(zip(outputs["cpu"], outputs["cuda"], strict=True)) if a.tokens != b.tokens]
    assert len(differ) <= len(demo.sources) // 100, differ
    for i in differ:
        assert abs(outputs["cpu"][i].score - outputs["cuda"][i].score) < 1e-3


def test_a_checkpoint_moves_between_the_gpu_and_the_cpu(tmp_path):
    """Half a run on the GPU, the rest resumed on the CPU (and the other way): both finish every update, and
    the resumed checkpoints load for inference on either device."""
    half = UPDATES // 2
    for first, second in (("cuda", "cpu"), ("cpu", "cuda")):
        name = f"{first}_then_{second}"
        cfg = tiny_config(tmp_path / name, f"train.max_updates={half}", f"train.save_every={half}",
                          f"train.device={first}")
        train(cfg)
        cfg = dataclasses.replace(cfg, train=dataclasses.replace(cfg.train, max_updates=UPDATES, device=second))
        train(cfg)
        run_dir = Path(cfg.train.run_dir)
        assert max(losses(run_dir)) == UPDATES
        last = run_dir / "checkpoints" / "last.pt"
        for device in ("cpu", "cuda"):
            model, _, _ = load_for_inference(last, device)
            assert next(model.parameters()).device.type == device


def test_the_random_state_holds_the_gpus_generators():
    """A checkpoint's random state carries every GPU generator and puts it back."""
    torch.cuda.init()
    torch.cuda.manual_seed_all(7)
    state = rng_state()
    assert "cuda" in state
    expected = torch.rand(4, device="cuda")
    torch.cuda.manual_seed_all(8)
    set_rng_state(state)
    assert torch.equal(torch.rand(4, device="cuda"), expected)
