"""``make bench``: data, training and decoding throughput on Multi30k en->de, one after the other.

    python scripts/bench.py [--data-dir ../shared/data/multi30k] [--decode-ckpt PATH]

Decoding is measured on a trained ``transformer_small`` (a random model never stops before the
length limit, so its speed says nothing). Without ``--decode-ckpt``, the first ``make bench`` trains
one and keeps it in ``runs/bench_small``: the Multi30k preset with ``model=transformer_small``,
lr 1e-3, 1k warmup, 800 updates (about 30 minutes on 2 cores; its beam outputs average as many pieces
as the references). Later runs reuse it. Each part prints its own figures (medians of several runs,
alternated where two systems are compared). With ``ctranslate2`` installed (not a dependency), the
decoding benchmark alternates mt and CTranslate2 on the same checkpoint (``scripts/bench_ct2.py``).
"""

from __future__ import annotations

import argparse
import importlib.util
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
DECODE_RUN = "bench_small"
DECODE_UPDATES = 800


def run(script: str, *args: str) -> None:
    print(f"\n=== {script} {' '.join(args)}", flush=True)
    subprocess.run([sys.executable, str(REPO / "scripts" / script), *args], check=True)


def train_once(name: str, updates: int, data_dir: str | Path, overrides: list[str], label: str) -> Path:
    """``runs/<name>/checkpoints/checkpoint_<updates>.pt`` of the paper's Multi30k model with ``overrides``,
    trained the first time and reused after (the benchmarks' checkpoints)."""
    run_dir = REPO / "runs" / name
    path = run_dir / "checkpoints" / f"checkpoint_{updates}.pt"
    if path.exists():
        return path
    command = [
        "experiment=multi30k_en_de_paper",  # the paper's model, as the other benchmarks and fairseq
        f"name={name}", f"train.run_dir={run_dir}", f"data.dir={data_dir}", f"train.max_updates={updates}",
        "train.max_time_minutes=0", "train.average_last=0", "train.test_at_end=false", "train.progress=false",
        "train.members=1",  # one checkpoint in runs/<name>/checkpoints, whatever the preset trains
        *overrides,
    ]
    print(f"\n=== training {label} ({updates} updates, once; reused from {path} after)", flush=True)
    t0 = time.monotonic()
    subprocess.run([sys.executable, "-m", "mt.train", *command], check=True, cwd=REPO)
    print(f"trained in {(time.monotonic() - t0) / 60:.1f} min", flush=True)
    return path


def train_decode_checkpoint(data_dir: str) -> Path:
    """Train the ``transformer_small`` that the decoding benchmark runs (once; reused after)."""
    overrides = ["data.pad_to_multiple=8", "model=transformer_small", "model.dropout=0.3", "optim.lr=0.001",
                 "optim.warmup_updates=1000", "train.validate_every=400", "train.save_every=400"]
    return train_once(DECODE_RUN, DECODE_UPDATES, data_dir, overrides, "the decoding benchmark's transformer_small")


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--data-dir", default=str(REPO.parent / "shared/data/multi30k"))
    p.add_argument("--decode-ckpt", type=Path, help="a trained transformer_small (default: train one, once)")
    p.add_argument("--skip", nargs="*", default=[], choices=["data", "train", "decode"], help="parts to leave out")
    args = p.parse_args()
    if "data" not in args.skip:
        run("bench_data.py", "--data-dir", args.data_dir)
    if "train" not in args.skip:
        run("bench_train.py", "--data-dir", args.data_dir)
    if "decode" not in args.skip:
        ckpt = args.decode_ckpt or train_decode_checkpoint(args.data_dir)
        decode_args = ("--ckpt", str(ckpt), "--input", f"{args.data_dir}/test_2016_flickr.en.gz")
        if importlib.util.find_spec("ctranslate2") is None:
            run("bench_decode.py", *decode_args)
            print("\n(pip install ctranslate2 to time the same checkpoint in CTranslate2 too: scripts/bench_ct2.py)")
            return
        for _ in range(2):  # alternated, so machine drift hits both systems alike
            run("bench_decode.py", *decode_args, "--repeats", "2")
            run("bench_ct2.py", *decode_args, "--repeats", "2")


if __name__ == "__main__":
    main()
