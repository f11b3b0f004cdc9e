"""What one greedy decoding step costs at 1 to 64 rows: mt against CTranslate2, on the same checkpoint.

    python scripts/bench_step_cost.py [--ckpt-mini PATH] [--rounds 2] [--rows 1 4 16 64] [--steps 40]
                                      [--reps 7] [--threads 2] [--ct2-mkl off|on] [--force] [--smoke]

``make bench-decode-peers`` says how fast each engine decodes a test set; this says where a gap comes from.
Both engines decode the first R lines of test2016 (R in ``--rows``) greedily, every output exactly
``--steps`` pieces (EOS banned before that: mt's ``min_len``, CTranslate2's ``min_decoding_length``; the
limit is that too), so every step holds R rows. A step's cost is the batch's time (text in, text out:
SentencePiece, the encoder and every step; the median of ``--reps``, after one untimed run) over
``--steps``. The row counts then split it in two:

- the cost of a step of **one row**: what every step pays whatever its rows (dispatching its operations,
  Python, the search loop's bookkeeping), nearly all of it at 1 row;
- the cost of **each further row** (``(cost at the most rows - cost at 1 row) / (rows - 1)``): the
  arithmetic, which grows with the rows.

The checkpoint is ``make bench-decode-peers``'s mini (the paper's Post-LN model, ``transformer_mini``; trained
once into ``runs/bench_decode_mini`` when ``--ckpt-mini`` is not given), exported by ``mt-export`` into
``--work-dir``. Each engine runs in its own fresh process on ``--threads`` threads (CTranslate2's never
imports torch), alternated mt, CTranslate2, mt, ... for ``--rounds`` rounds; the script refuses to start while
another process uses the CPU (``--force`` overrides). CTranslate2 runs its own oneDNN backend unless
``--ct2-mkl on`` (on the CPUs measured, oneDNN is its faster one here). It prints every round, then the
medians, and last ``one-row step mt: X ms, ct2: Y ms`` and ``each further row mt: X us, ct2: Y us``.

``--smoke`` (the test's): rows 1 and 2, 3 steps, 1 round, 1 rep, no busy check.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

from bench_ct2 import read_lines
from bench_peers import git_commit, refuse_if_busy, thread_env, worker_or_main

REPO = Path(__file__).resolve().parents[1]
ENGINES = ("mt", "ct2")

Translate = Callable[[list[str]], tuple[list[str], list[int]]]  # lines -> their texts and output pieces


# ---- the timed workers (one fresh process each) ----------------------------------------------------


def time_batches(translate: Translate, lines: list[str], spec: dict) -> dict[str, dict]:
    """For each row count: seconds per step (median of ``reps``, after an untimed run) and output lengths."""
    figures = {}
    for rows in spec["rows"]:
        batch = lines[:rows]
        _, pieces = translate(batch)  # untimed: first-call set-up for this shape
        seconds = []
        for _ in range(spec["reps"]):
            start = time.perf_counter()
            translate(batch)
            seconds.append(time.perf_counter() - start)
        figures[str(rows)] = {"ms_per_step": 1000 * statistics.median(seconds) / spec["steps"],
                              "pieces": sorted(set(pieces))}
    return figures


def mt_worker(spec: dict) -> dict[str, dict]:
    import dataclasses

    import torch

    from mt.allocator import keep_freed_memory
    from mt.checkpoint import load_for_inference
    from mt.decode import Translator

    torch.set_num_threads(spec["threads"])
    keep_freed_memory()  # as mt-translate
    model, tokenizers, cfg = load_for_inference(spec["ckpt"], pack=True, precision="fp32")
    decode = dataclasses.replace(
        cfg.decode, strategy="greedy", beam_size=1, nbest=1, min_len=spec["steps"], max_len_a=0.0,
        max_len_b=spec["steps"], max_sentences=max(spec["rows"]), max_tokens=10**9,
    )
    translator = Translator(model, tokenizers, decode, "cpu", max_positions=spec["max_positions"])

    def translate(batch: list[str]) -> tuple[list[str], list[int]]:
        out = translator.translate_nbest(batch, scores=False)  # as CTranslate2 without return_scores
        return [t.text for t in out], [len(t.hypotheses[0].tokens) for t in out]

    return time_batches(translate, read_lines(Path(spec["input"]), max(spec["rows"])), spec)


def ct2_worker(spec: dict) -> dict[str, dict]:
    import ctranslate2
    from bench_decode_peers import ct2_tokenizers

    model = Path(spec["model"])
    source_sp, target_sp = ct2_tokenizers(model)
    translator = ctranslate2.Translator(str(model), device="cpu", compute_type="float32",
                                        intra_threads=spec["threads"], inter_threads=1)

    def translate(batch: list[str]) -> tuple[list[str], list[int]]:
        sources = [source_sp.encode(line, out_type=str) for line in batch]
        out = translator.translate_batch(
            sources, max_batch_size=len(batch), batch_type="examples", beam_size=1,
            max_decoding_length=spec["steps"], min_decoding_length=spec["steps"], return_end_token=True,
        )
        hyps = [r.hypotheses[0] for r in out]
        texts = [target_sp.decode([p for p in h if p != "</s>"]) for h in hyps]
        return texts, [len(h) - (h[-1:] == ["</s>"]) for h in hyps]

    figures = time_batches(translate, read_lines(Path(spec["input"]), max(spec["rows"])), spec)
    if "torch" in sys.modules:
        raise SystemExit("bench_step_cost: the CTranslate2 worker imported torch; its timing would not be alone")
    return figures


# ---- the parent: checkpoint, export, alternation, report --------------------------------------------


def run_worker(engine: str, spec: dict, args: argparse.Namespace) -> dict[str, dict]:
    """One fresh process of ``engine`` (this script, ``--worker``); its figures."""
    out = args.work_dir / f"step-cost-{engine}.json"
    env = thread_env(args.threads) | {"PYTHONPATH": str(REPO), "CT2_USE_MKL": "1" if args.ct2_mkl == "on" else "0"}
    cmd = [sys.executable, str(Path(__file__).resolve()), "--worker", engine, json.dumps(spec), str(out)]
    subprocess.run(cmd, env=env, check=True)
    return json.loads(out.read_text(encoding="utf-8"))


def split_cost(ms_per_step: dict[int, float]) -> tuple[float, float]:
    """(the one-row step in ms, each further row in us) from ms per step by row count (1 and more rows)."""
    most = max(ms_per_step)
    one = ms_per_step[1]
    return one, 1000 * (ms_per_step[most] - one) / (most - 1)


def parse_args() -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--ckpt-mini", type=Path, help="an mt checkpoint (default: make bench-decode-peers's mini)")
    p.add_argument("--data-dir", type=Path, default=REPO.parent / "shared" / "data" / "multi30k")
    p.add_argument("--input", type=Path, help="source lines (default: <data-dir>/test_2016_flickr.en.gz)")
    p.add_argument("--rows", type=int, nargs="+", default=[1, 4, 16, 64], help="rows a step (1 first)")
    p.add_argument("--steps", type=int, default=40, help="pieces every output has")
    p.add_argument("--reps", type=int, default=7, help="timed runs of each row count (the median counts)")
    p.add_argument("--rounds", type=int, default=2, help="mt/CTranslate2 rounds (alternated)")
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--ct2-mkl", choices=("on", "off"), default="off", help="CTranslate2's Intel MKL backend")
    p.add_argument("--work-dir", type=Path, default=REPO / "runs" / "bench_decode_peers",
                   help="the CTranslate2 model and the workers' results")
    p.add_argument("--force", action="store_true", help="start even if other processes are busy")
    p.add_argument("--smoke", action="store_true", help="rows 1 and 2, 3 steps, 1 round, 1 rep, no busy check")
    args = p.parse_args()
    if args.smoke:
        args.rows, args.steps, args.rounds, args.reps, args.force = [1, 2], 3, 1, 1, True
    if sorted(set(args.rows)) != args.rows or args.rows[0] != 1 or len(args.rows) < 2:
        p.error(f"--rows must rise from 1 with at least two counts, e.g. 1 4 16 64; got {args.rows}")
    if min(args.steps, args.reps, args.rounds, args.threads) < 1:
        p.error("--steps, --reps, --rounds and --threads must be at least 1")
    args.input = args.input or args.data_dir / "test_2016_flickr.en.gz"
    return args


def worker_spec(args: argparse.Namespace, ckpt: Path) -> dict:
    """Both engines' settings; exports ``ckpt`` for CTranslate2 into the work directory."""
    from mt.checkpoint import load_checkpoint
    from mt.config import to_config
    from mt.export import export_ctranslate2

    ct2_dir = args.work_dir / "ct2-step-cost"
    export_ctranslate2(ckpt, ct2_dir, None, force=True)
    cfg = to_config(load_checkpoint(ckpt)["config"])
    return dict(ckpt=str(ckpt), model=str(ct2_dir), input=str(args.input), rows=args.rows, steps=args.steps,
                reps=args.reps, threads=args.threads, max_positions=cfg.model.max_positions)


def main() -> None:
    args = parse_args()
    refuse_if_busy(args.force)
    args.work_dir.mkdir(parents=True, exist_ok=True)
    if args.ckpt_mini is None:
        from bench_decode_peers import train_mini

        args.ckpt_mini = train_mini(args.data_dir)
    spec = worker_spec(args, args.ckpt_mini)
    print(f"commit {git_commit()}, {args.threads} threads, greedy, {args.steps} pieces an output, rows "
          f"{' '.join(map(str, args.rows))}, median of {args.reps} per row count, {args.rounds} round(s)", flush=True)
    runs: dict[str, list[dict[str, dict]]] = {engine: [] for engine in ENGINES}
    for round_ in range(1, args.rounds + 1):
        for engine in ENGINES:
            figures = run_worker(engine, spec, args)
            runs[engine].append(figures)
            cells = "  ".join(f"{rows} rows {figures[str(rows)]['ms_per_step']:6.3f}" for rows in args.rows)
            lengths = sorted({n for rows in args.rows for n in figures[str(rows)]["pieces"]})
            print(f"round {round_} {engine:3s} ms/step: {cells}  (pieces {lengths})", flush=True)
    print(f"\nmedians over {args.rounds} round(s), ms/step:")
    split = {}
    for engine in ENGINES:
        medians = {rows: statistics.median(f[str(rows)]["ms_per_step"] for f in runs[engine]) for rows in args.rows}
        split[engine] = split_cost(medians)
        print(f"  {engine:3s}: " + "  ".join(f"{rows} rows {ms:6.3f}" for rows, ms in medians.items()))
    print()
    print(f"one-row step mt: {split['mt'][0]:.3f} ms, ct2: {split['ct2'][0]:.3f} ms")
    print(f"each further row mt: {split['mt'][1]:.1f} us, ct2: {split['ct2'][1]:.1f} us")


if __name__ == "__main__":
    worker_or_main({"mt": mt_worker, "ct2": ct2_worker}, main)
