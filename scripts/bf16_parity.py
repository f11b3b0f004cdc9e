"""bf16 against fp32 training on Multi30k En->De: valid perplexity after the same updates (``make bench-bf16``).

    python scripts/bf16_parity.py [--seeds 1 2 3] [--updates 800] [--validate-every 200]
                                  [--out runs/bf16_parity] [--report-only]

For each seed, one ``python -m mt.train experiment=multi30k_en_de`` run with ``train.precision=fp32`` and one with
``train.precision=bf16``, alternated (fp32 s1, bf16 s1, fp32 s2, ...), one process at a time, each stopping at
``--updates`` updates with a validation (valid loss, no BLEU) every ``--validate-every``. Everything else is the
preset's (data, model, batches, schedule, seed-dependent initialisation and data order). A finished run is not
trained again, so an interrupted comparison resumes.

Prints and writes ``parity.md`` (valid perplexity per seed at each validation step, the bf16/fp32 difference
in percent, training target tokens/s of each run) and ``valid_ppl.png`` (the difference against updates) to
``--out``. Last line:
``bf16 parity: max |ppl difference| X.XX% at <updates> updates over N seeds (goal <= 2%)``.
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
PRECISIONS = ("fp32", "bf16")


def train_overrides(args: argparse.Namespace, run_dir: Path, precision: str, seed: int) -> list[str]:
    return [
        "experiment=multi30k_en_de", f"data.dir={args.data_dir}", f"train.run_dir={run_dir}",
        f"train.precision={precision}", f"train.seed={seed}", f"train.max_updates={args.updates}",
        "train.max_time_minutes=0", f"train.validate_every={args.validate_every}", "train.valid_bleu=false",
        "train.best_metric=loss", f"train.save_every={args.updates}", "train.keep_last=1", "train.average_last=0",
        "train.test_at_end=false", "train.samples=0", "train.progress=false", "train.tensorboard=false",
        "train.threads=2", "train.members=1",
    ]


def read_rows(run_dir: Path) -> list[dict]:
    from mt.eval.plots import read_metrics

    path = run_dir / "metrics.jsonl"
    return read_metrics(path) if path.exists() else []


def valid_curve(rows: list[dict]) -> dict[int, float]:
    """Valid perplexity by update step (the last value logged at each step)."""
    return {r["step"]: r["ppl"] for r in rows if r.get("split") == "valid"}


def tokens_per_s(rows: list[dict], skip: int = 1) -> float:
    """Training target tokens/s over the logged intervals after the first ``skip`` (warm-up) ones."""
    train = [r for r in rows if r.get("split") == "train" and r.get("tokens_per_s")][skip:]
    tokens = sum(r["ntokens"] for r in train)
    return tokens / sum(r["ntokens"] / r["tokens_per_s"] for r in train) if train else float("nan")


def finished(rows: list[dict], updates: int) -> bool:
    return updates in valid_curve(rows)


def train(args: argparse.Namespace, run_dir: Path, precision: str, seed: int) -> None:
    cmd = [sys.executable, "-m", "mt.train", *train_overrides(args, run_dir, precision, seed)]
    print("$ " + " ".join(cmd), flush=True)
    run_dir.parent.mkdir(parents=True, exist_ok=True)
    with open(run_dir.parent / f"{run_dir.name}.log", "a", encoding="utf-8") as log:
        code = subprocess.run(cmd, stdout=log, stderr=subprocess.STDOUT, check=False, cwd=REPO).returncode
    if code != 0:
        sys.exit(f"bf16_parity: error: run {run_dir.name} failed (exit {code}); see {run_dir}.log")


def relative_difference(bf16: float, fp32: float) -> float:
    """(bf16 - fp32) / fp32 in percent."""
    return 100.0 * (bf16 - fp32) / fp32


def table(curves: dict[tuple[str, int], dict[int, float]], speeds: dict[tuple[str, int], float],
          seeds: list[int]) -> str:
    steps = sorted(set.intersection(*(set(c) for c in curves.values())))
    lines = ["| seed | updates | fp32 valid ppl | bf16 valid ppl | bf16 - fp32 |",
             "| ---: | ---: | ---: | ---: | ---: |"]
    for seed in seeds:
        for step in steps:
            a, b = curves["fp32", seed][step], curves["bf16", seed][step]
            lines.append(f"| {seed} | {step:,} | {a:.3f} | {b:.3f} | {relative_difference(b, a):+.2f}% |")
    last = steps[-1]
    fp32_mean = statistics.mean(curves["fp32", s][last] for s in seeds)
    bf16_mean = statistics.mean(curves["bf16", s][last] for s in seeds)
    lines.append(f"| mean | {last:,} | {fp32_mean:.3f} | {bf16_mean:.3f} | "
                 f"{relative_difference(bf16_mean, fp32_mean):+.2f}% |")
    lines += ["", "| seed | fp32 train tok/s | bf16 train tok/s | bf16 / fp32 |", "| ---: | ---: | ---: | ---: |"]
    for seed in seeds:
        a, b = speeds["fp32", seed], speeds["bf16", seed]
        lines.append(f"| {seed} | {a:,.0f} | {b:,.0f} | {b / a:.2f} |")
    return "\n".join(lines)


def plot(curves: dict[tuple[str, int], dict[int, float]], seeds: list[int], out: Path) -> Path:
    """The bf16 - fp32 valid perplexity difference (%) of each seed against updates (the curves themselves
    overlap to the eye)."""
    from mt.eval.plots import line_plot

    lines = []
    for seed in seeds:
        steps = sorted(set(curves["fp32", seed]) & set(curves["bf16", seed]))
        diffs = [relative_difference(curves["bf16", seed][s], curves["fp32", seed][s]) for s in steps]
        lines.append((f"seed {seed}", steps, diffs))
    return line_plot(out / "valid_ppl.png", "Multi30k valid perplexity: bf16 against fp32, same updates",
                     "bf16 - fp32 valid perplexity (%)", lines)


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--seeds", type=int, nargs="+", default=[1, 2, 3])
    p.add_argument("--updates", type=int, default=800)
    p.add_argument("--validate-every", type=int, default=200)
    p.add_argument("--out", type=Path, default=REPO / "runs" / "bf16_parity")
    p.add_argument("--data-dir", default=str(REPO.parent / "shared" / "data" / "multi30k"))
    p.add_argument("--report-only", action="store_true", help="only the table and PNG of finished runs")
    args = p.parse_args(argv)
    if args.updates <= 0 or args.validate_every <= 0 or args.updates % args.validate_every:
        p.error(f"--updates={args.updates} must be a positive multiple of --validate-every={args.validate_every}")
    curves, speeds = {}, {}
    for seed in args.seeds:
        for precision in PRECISIONS:
            run_dir = args.out / f"{precision}_seed{seed}"
            if not finished(read_rows(run_dir), args.updates):
                if args.report_only:
                    sys.exit(f"bf16_parity: error: {run_dir} has not reached {args.updates} updates")
                train(args, run_dir, precision, seed)
            rows = read_rows(run_dir)
            curves[precision, seed], speeds[precision, seed] = valid_curve(rows), tokens_per_s(rows)
            print(f"{run_dir.name}: valid ppl {curves[precision, seed][args.updates]:.3f} at {args.updates} "
                  f"updates, {speeds[precision, seed]:,.0f} train tok/s", flush=True)
    md = table(curves, speeds, args.seeds)
    (args.out / "parity.md").write_text(md + "\n")
    worst = max(abs(relative_difference(curves["bf16", s][args.updates], curves["fp32", s][args.updates]))
                for s in args.seeds)
    print(f"\n{md}\n\nvalid perplexity differences: {plot(curves, args.seeds, args.out)}")
    print(f"bf16 parity: max |ppl difference| {worst:.2f}% at {args.updates} updates over {len(args.seeds)} seeds "
          f"(goal <= 2%)")


if __name__ == "__main__":
    main()
