"""The GPU check: what a lent accelerator should run, in one command that writes one report.

    python scripts/gpu_check.py [--out reports/gpu-check] [--updates 60] [--minutes 9]     (make gpu-check)

Without CUDA it says so and exits 0. With it, each step bounded in time (the whole within ``--minutes``):

1. the test suite's CUDA tests (``pytest -m cuda``, tests/test_cuda.py and the device tests): training in
   fp16 and bf16 against fp32, the GPU against the CPU, decoding on the GPU against the CPU, checkpoints
   moving between devices, the CUDA random state;
2. training throughput: ``model=transformer_base`` on the demo data (embedded, offline), ``--updates`` updates
   in fp32, bf16 and fp16, target tokens/s from each run's ``metrics.jsonl`` (the median after the first
   logged window);
3. decoding: the fp32 run's checkpoint translating the demo test set on the GPU (greedy and beam 4,
   sentences/s), its outputs against the CPU's, and CTranslate2's CUDA build on the same export where it is
   installed.

The report (``report.md``, ``report.json``) lands in ``--out``, a step's failure in it too; the exit status
is 1 when a step failed.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import torch

REPO = Path(__file__).resolve().parents[1]
PRECISIONS = ("fp32", "bf16", "fp16")
DEMO_TRAINING = [
    "model=transformer_base", "data.demo.train_size=20000", "data.demo.valid_size=200", "data.demo.test_size=300",
    "data.max_tokens=8192", "train.log_every=10", "train.progress=false", "train.tensorboard=false",
    "train.test_at_end=false", "train.valid_bleu=false", "train.validate_every=100000",
]


def cuda_summary() -> dict | None:
    """The GPU torch sees (None: none)."""
    if not torch.cuda.is_available():
        return None
    props = torch.cuda.get_device_properties(0)
    return {"name": props.name, "memory_gib": round(props.total_memory / 2**30, 1), "capability": list(
        torch.cuda.get_device_capability(0)), "torch": torch.__version__, "cuda": torch.version.cuda,
        "devices": torch.cuda.device_count(), "python": platform.python_version()}


def run_step(command: list[str], seconds: float, cwd: Path = REPO) -> tuple[int, str, float]:
    """(exit status, the output's last 40 lines, seconds) of ``command``; 124 when it ran past ``seconds``."""
    start = time.monotonic()
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(REPO), os.environ.get("PYTHONPATH")])),
           "HF_HUB_OFFLINE": "1", "HF_DATASETS_OFFLINE": "1", "PYTHONUNBUFFERED": "1"}
    try:
        done = subprocess.run(command, cwd=cwd, env=env, capture_output=True, timeout=max(seconds, 1))
        code, output = done.returncode, text(done.stdout) + text(done.stderr)
    except subprocess.TimeoutExpired as e:
        code, output = 124, f"{text(e.stdout)}{text(e.stderr)}\n(stopped after {seconds:.0f} s)"
    return code, "\n".join(output.splitlines()[-40:]), time.monotonic() - start


def text(output: bytes | str | None) -> str:
    return output.decode("utf-8", "replace") if isinstance(output, bytes) else output or ""


def step_tests(seconds: float) -> dict:
    code, tail, spent = run_step([sys.executable, "-m", "pytest", "-q", "-m", "cuda", "-p", "no:cacheprovider",
                                  "tests/test_cuda.py", "tests/test_device.py"], seconds)
    return {"step": "CUDA tests", "ok": code == 0, "seconds": round(spent, 1), "summary": tail.splitlines()[-1:],
            "output": tail}


def step_training(work: Path, updates: int, seconds: float) -> dict:
    """transformer_base on the demo data, each precision's median tokens/s."""
    figures, ok, outputs = {}, True, {}
    for precision in PRECISIONS:
        run_dir = work / f"train_{precision}"
        code, tail, spent = run_step([sys.executable, "-m", "mt.train", *DEMO_TRAINING, "train.device=cuda",
                                      f"train.precision={precision}", f"train.max_updates={updates}",
                                      f"train.save_every={updates}", f"train.run_dir={run_dir}",
                                      f"data.cache_dir={work / 'cache'}"], seconds / len(PRECISIONS))
        rows = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()] \
            if (run_dir / "metrics.jsonl").exists() else []
        speeds = [r["tokens_per_s"] for r in rows if r.get("split") == "train"][1:]
        figures[precision] = {"tokens_per_s": round(statistics.median(speeds)) if speeds else None,
                              "seconds": round(spent, 1), "exit": code}
        ok &= code == 0 and bool(speeds)
        if code != 0:
            outputs[precision] = tail
    return {"step": "training throughput (transformer_base, demo data)", "ok": ok, "figures": figures,
            "output": outputs}


def step_decoding(work: Path, seconds: float) -> dict:
    code, tail, spent = run_step([sys.executable, str(REPO / "scripts" / "gpu_check.py"), "--decode-only",
                                  str(work / "train_fp32" / "checkpoints" / "last.pt"),
                                  "--json", str(work / "decoding.json")], seconds)
    found = json.loads((work / "decoding.json").read_text()) if (work / "decoding.json").exists() else {}
    return {"step": "decoding (the fp32 run's checkpoint, demo test set)", "ok": code == 0 and bool(found),
            "figures": found, "seconds": round(spent, 1), "output": tail if code else ""}


def decode_figures(ckpt: Path, device: str = "cuda", limit: int | None = None) -> dict:
    """Sentences/s on ``device`` (greedy, beam 4), lines equal to the CPU's, and CTranslate2's CUDA build."""
    import dataclasses

    from mt.checkpoint import load_for_inference
    from mt.data.demo import demo_line, demo_numbers
    from mt.decode import Translator

    model, tokenizers, cfg = load_for_inference(ckpt, device)
    lines = [demo_line(n)[0] for n in demo_numbers(cfg.data.demo)["test"]][:limit]
    figures: dict = {"lines": len(lines)}
    for strategy, beam in (("greedy", 1), ("beam", 4)):
        settings = dataclasses.replace(cfg.decode, strategy=strategy, beam_size=beam)
        outputs = {}
        for where in (device, "cpu"):
            loaded = model if where == device else load_for_inference(ckpt, "cpu")[0]
            translator = Translator(loaded, tokenizers, settings, where, max_positions=cfg.model.max_positions)
            translator.translate(lines[:16])  # warm-up
            synchronize(where)
            start = time.perf_counter()
            outputs[where] = translator.translate(lines)
            synchronize(where)
            figures[f"{strategy} {where} sentences/s"] = round(len(lines) / (time.perf_counter() - start), 1)
        figures[f"{strategy} lines equal"] = sum(a == b for a, b in zip(outputs[device], outputs["cpu"], strict=True))
    figures.update(ctranslate2_figures(ckpt, lines))
    return figures


def synchronize(device: str) -> None:
    if device.startswith("cuda"):
        torch.cuda.synchronize()


def ctranslate2_figures(ckpt: Path, lines: list[str]) -> dict:
    """CTranslate2's CUDA build on mt's export of ``ckpt`` (empty where it is not installed or has no CUDA)."""
    try:
        import ctranslate2
    except ImportError:
        return {"ctranslate2": "not installed"}
    if ctranslate2.get_cuda_device_count() == 0:
        return {"ctranslate2": f"{ctranslate2.__version__} sees no GPU"}
    from mt.checkpoint import load_tokenizers_and_config
    from mt.export import export_ctranslate2

    out = Path(tempfile.mkdtemp()) / "ct2"
    export_ctranslate2(ckpt, out)
    tokenizers, _ = load_tokenizers_and_config(ckpt)
    pieces = [[tokenizers.src.id_to_piece(i) for i in tokenizers.src.encode(line)] for line in lines]
    figures: dict = {"ctranslate2": ctranslate2.__version__}
    for compute_type in ("float32", "bfloat16", "int8_float16"):
        translator = ctranslate2.Translator(str(out), device="cuda", compute_type=compute_type)
        for beam in (1, 4):
            translator.translate_batch(pieces[:16], beam_size=beam)
            start = time.perf_counter()
            translator.translate_batch(pieces, beam_size=beam, max_batch_size=64)
            figures[f"ctranslate2 {compute_type} beam {beam} sentences/s"] = round(
                len(lines) / (time.perf_counter() - start), 1)
    return figures


def write_report(out: Path, device: dict | None, steps: list[dict]) -> None:
    out.mkdir(parents=True, exist_ok=True)
    (out / "report.json").write_text(json.dumps({"device": device, "steps": steps}, indent=2), encoding="utf-8")
    lines = ["# GPU check", "", f"Device: {json.dumps(device)}" if device else "Device: no CUDA device", ""]
    for step in steps:
        lines += [f"## {step['step']}: {'ok' if step['ok'] else 'FAILED'}", ""]
        for key, value in (step.get("figures") or {}).items():
            lines.append(f"- {key}: {json.dumps(value)}")
        lines += [f"- {line}" for line in step.get("summary", [])]
        output = step.get("output")
        if output:
            text = output if isinstance(output, str) else "\n".join(f"{k}:\n{v}" for k, v in output.items())
            lines += ["", "```", text, "```"]
        lines.append("")
    (out / "report.md").write_text("\n".join(lines), encoding="utf-8")


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--out", type=Path, default=Path("reports/gpu-check"))
    p.add_argument("--updates", type=int, default=60, help="training updates per precision")
    p.add_argument("--minutes", type=float, default=9.0, help="the whole check's bound")
    p.add_argument("--decode-only", type=Path, metavar="CKPT", help=argparse.SUPPRESS)  # step 3's own process
    p.add_argument("--json", type=Path, help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    device = cuda_summary()
    if args.decode_only:
        args.json.write_text(json.dumps(decode_figures(args.decode_only)), encoding="utf-8")
        return 0
    if device is None:
        print(f"gpu-check: no CUDA device is visible to torch {torch.__version__} "
              f"(CUDA build: {torch.version.cuda or 'none'}): nothing to check on this machine")
        return 0
    print(f"gpu-check: {device['name']}, {device['memory_gib']} GiB, torch {device['torch']}, CUDA {device['cuda']}",
          flush=True)
    budget = args.minutes * 60
    steps = []
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        for share, step in ((0.35, step_tests), (0.4, lambda s: step_training(work, args.updates, s)),
                            (0.25, lambda s: step_decoding(work, s))):
            result = step(budget * share)
            steps.append(result)
            print(f"gpu-check: {result['step']}: {'ok' if result['ok'] else 'FAILED'}", flush=True)
            write_report(args.out, device, steps)  # after each step: a check stopped later keeps what it found
    print(f"gpu-check: report in {args.out / 'report.md'}")
    return 0 if all(step["ok"] for step in steps) else 1


if __name__ == "__main__":
    sys.exit(main())
