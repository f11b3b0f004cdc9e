"""``make bench``: data, training and decoding throughput on Multi30k en->de, one after the other.

    python scripts/bench.py [--ckpt runs/multi30k_en_de/checkpoints/best.pt] [--data-dir ../shared/data/multi30k]

Decoding needs a trained transformer_small (a random one never stops before the length limit): by
default the checkpoint of ``make train EXP=multi30k_en_de``; without one, decoding is skipped with a
note. Each part prints its own figures (medians of several runs where the machine drifts).
"""

from __future__ import annotations

import argparse
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]


def run(script: str, *args: str) -> None:
    print(f"\n=== {script} {' '.join(args)}", flush=True)
    subprocess.run([sys.executable, str(REPO / "scripts" / script), *args], check=True)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--data-dir", default=str(REPO.parent / "shared/data/multi30k"))
    p.add_argument("--ckpt", type=Path, default=REPO / "runs/multi30k_en_de/checkpoints/best.pt")
    args = p.parse_args()
    run("bench_data.py", "--data-dir", args.data_dir)
    run("bench_train.py", "--data-dir", args.data_dir)
    if args.ckpt.exists():
        run("bench_decode.py", "--ckpt", str(args.ckpt), "--input", f"{args.data_dir}/test_2016_flickr.en.gz")
    else:
        print(f"\n=== decoding skipped: no checkpoint at {args.ckpt} (make train EXP=multi30k_en_de)")


if __name__ == "__main__":
    main()
