"""Training throughput against batch size and threads, fp32 and bf16 (``make bench-curves``).

    python scripts/bench_curves.py [--model transformer_small] [--max-tokens 1024 2048 4096 8192]
                                   [--threads 1 2] [--updates 8] [--repeats 2] [--out bench/curves]

Each point is one fresh ``scripts/bench_train.py`` process (Multi30k en->de, joint 8k BPE, dropout 0.3, the
paper's Post-LN model), run one at a time: first every ``--max-tokens`` at the largest ``--threads``, then every
other thread count at 4096 tokens; at each point fp32 and bf16 are run back to back (alternated, so the
machine's drift touches both alike). Writes ``curves.md`` (target tokens/s, updates/s, peak RSS, bf16/fp32),
``curves.json`` (the rows) and ``curves.png`` (tokens/s against max_tokens from 0, a series per precision
and thread count) to ``--out``.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
PRECISIONS = ("fp32", "bf16")
FIGURES = {
    "tokens_per_s": r"median target tokens/s\s*:\s*([\d,.]+)",
    "updates_per_s": r"median updates/s\s*:\s*([\d.]+)",
    "peak_rss_mib": r"peak RSS\s*:\s*([\d,]+) MiB",
}


def parse_bench_train(output: str) -> dict[str, float]:
    """The medians and peak RSS that ``bench_train.py`` prints last."""
    found = {}
    for key, pattern in FIGURES.items():
        match = re.search(pattern, output)
        if match is None:
            raise SystemExit(f"bench_curves: error: no '{key}' in bench_train's output:\n{output[-2000:]}")
        found[key] = float(match.group(1).replace(",", ""))
    return found


def points(max_tokens: list[int], threads: list[int]) -> list[tuple[int, int]]:
    """``(max_tokens, threads)``: the batch sweep at the most threads, then the thread sweep at 4096 tokens."""
    most = max(threads)
    sweep = [(m, most) for m in max_tokens]
    return sweep + [(4096, t) for t in sorted(threads) if t != most]


def run_point(args: argparse.Namespace, max_tokens: int, threads: int, precision: str) -> dict:
    cmd = [sys.executable, str(REPO / "scripts" / "bench_train.py"), "--model", args.model, "--precision", precision,
           "--max-tokens", str(max_tokens), "--threads", str(threads), "--updates", str(args.updates),
           "--repeats", str(args.repeats), "--warmup", str(args.warmup), "--data-dir", args.data_dir]
    env = {"OMP_NUM_THREADS": str(threads), "MKL_NUM_THREADS": str(threads), "PYTHONPATH": str(REPO)}
    out = subprocess.run(cmd, capture_output=True, text=True, env={**os.environ, **env}, cwd=REPO)
    if out.returncode != 0:
        raise SystemExit(f"bench_curves: error: {' '.join(cmd)} failed:\n{out.stdout[-2000:]}{out.stderr[-2000:]}")
    row = {"max_tokens": max_tokens, "threads": threads, "precision": precision, **parse_bench_train(out.stdout)}
    print(f"max_tokens {max_tokens:5d}, {threads} thread(s), {precision}: {row['tokens_per_s']:7,.0f} target tok/s, "
          f"{row['updates_per_s']:.3f} updates/s, peak RSS {row['peak_rss_mib']:,.0f} MiB", flush=True)
    return row


def table(rows: list[dict]) -> str:
    lines = ["| max_tokens | threads | fp32 tok/s | bf16 tok/s | bf16 / fp32 | fp32 upd/s | bf16 upd/s "
             "| fp32 peak RSS MiB | bf16 peak RSS MiB |", "|" + " ---: |" * 9]
    by_point: dict[tuple[int, int], dict[str, dict]] = {}
    for r in rows:
        by_point.setdefault((r["max_tokens"], r["threads"]), {})[r["precision"]] = r
    for (max_tokens, threads), pair in by_point.items():
        a, b = pair["fp32"], pair["bf16"]
        lines.append(f"| {max_tokens:,} | {threads} | {a['tokens_per_s']:,.0f} | {b['tokens_per_s']:,.0f} "
                     f"| {b['tokens_per_s'] / a['tokens_per_s']:.2f} | {a['updates_per_s']:.3f} "
                     f"| {b['updates_per_s']:.3f} | {a['peak_rss_mib']:,.0f} | {b['peak_rss_mib']:,.0f} |")
    return "\n".join(lines)


def plot_series(rows: list[dict]) -> list[tuple[str, list[int], list[float]]]:
    """(label, max_tokens, tokens/s) for each precision and thread count, most threads first."""
    series = []
    for threads in sorted({r["threads"] for r in rows}, reverse=True):
        for precision in PRECISIONS:
            mine = sorted((r for r in rows if r["precision"] == precision and r["threads"] == threads),
                          key=lambda r: r["max_tokens"])
            if mine:
                label = f"{precision}, {threads} thread{'s' if threads > 1 else ''}"
                series.append((label, [r["max_tokens"] for r in mine], [r["tokens_per_s"] for r in mine]))
    return series


def plot(rows: list[dict], model: str, out: Path) -> Path:
    from mt.eval.plots import line_plot

    return line_plot(out / "curves.png", f"{model} training throughput on this CPU (Multi30k)",
                     "target tokens/s", plot_series(rows), x_label="max_tokens (per update)", y_from_zero=True)


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--model", default="transformer_small")
    p.add_argument("--max-tokens", type=int, nargs="+", default=[1024, 2048, 4096, 8192])
    p.add_argument("--threads", type=int, nargs="+", default=[1, 2])
    p.add_argument("--updates", type=int, default=8, help="timed updates per repeat")
    p.add_argument("--repeats", type=int, default=2)
    p.add_argument("--warmup", type=int, default=2)
    p.add_argument("--data-dir", default=str(REPO.parent / "shared" / "data" / "multi30k"))
    p.add_argument("--out", type=Path, default=REPO / "bench" / "curves")
    args = p.parse_args(argv)
    grid = [(m, t, precision) for m, t in points(args.max_tokens, args.threads) for precision in PRECISIONS]
    rows = [run_point(args, *point) for point in grid]
    args.out.mkdir(parents=True, exist_ok=True)
    md = table(rows)
    (args.out / "curves.md").write_text(md + "\n")
    (args.out / "curves.json").write_text(json.dumps(rows, indent=1) + "\n")
    print(f"\n{md}\n\nplot: {plot(rows, args.model, args.out)}")


if __name__ == "__main__":
    main()
