"""Training throughput of a model config on Multi30k en->de (a fixed benchmark setting).

    python scripts/bench_train.py [--data-dir ../shared/data/multi30k] [--model transformer_small]
                                  [--updates 20] [--repeats 3] [--warmup 5] [--threads 2]
                                  [--max-tokens 4096] [--precision fp32|bf16] [--override KEY=VALUE ...]

The paper's model (``experiment=multi30k_en_de_paper``: Post-LN, sinusoids), joint 8k BPE, dropout 0.3.
Times whole updates (collate + forward + backward + Adam), after ``--warmup`` untimed updates; prints
target tokens/s, updates/s and peak RSS.
"""

from __future__ import annotations

import argparse
import resource
import statistics
import tempfile
import time
from pathlib import Path

import torch

from mt.config import compose
from mt.data import collate
from mt.train.optim import set_lr
from mt.train.setup import build_components, step_context
from mt.train.step import train_step


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--data-dir", default=str(Path(__file__).resolve().parents[2] / "shared/data/multi30k"))
    p.add_argument("--model", default="transformer_small")
    p.add_argument("--updates", type=int, default=20, help="timed updates per run")
    p.add_argument("--repeats", type=int, default=3, help="runs; the median is reported")
    p.add_argument("--warmup", type=int, default=5)
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--max-tokens", type=int, default=4096)
    p.add_argument("--precision", default="fp32")
    p.add_argument("--override", action="append", default=[], metavar="KEY=VALUE",
                   help="an extra Hydra override, e.g. model.kv_heads=2 (repeatable)")
    args = p.parse_args()
    torch.set_num_threads(args.threads)
    with tempfile.TemporaryDirectory() as tmp:
        cfg = compose([
            "experiment=multi30k_en_de_paper", f"model={args.model}", "model.dropout=0.3",  # as the peers train it
            f"data.dir={args.data_dir}", "data.vocab_size=8000", f"data.max_tokens={args.max_tokens}",
            f"train.run_dir={tmp}/run", f"train.threads={args.threads}", f"train.precision={args.precision}",
            "train.tensorboard=false", "train.progress=false", *args.override,
        ])
        parts = build_components(cfg)  # a fresh run: nothing to resume
        ctx = step_context(parts)
        train = parts.data.splits["train"]
        set_lr(parts.optimizer, 1e-4)
        batches = iter(parts.sampler.batches(0))
        params = sum(p.numel() for p in parts.model.parameters())
        print(f"model {args.model} ({params / 1e6:.1f}M params), {args.threads} threads, "
              f"max_tokens {args.max_tokens}, {args.precision}, {args.repeats} x {args.updates} timed updates")
        t0 = time.perf_counter()
        for _ in range(args.warmup):
            train_step(ctx, [collate(train, next(batches), cfg.data.pad_to_multiple)])
        print(f"  warmup: {args.warmup} updates in {time.perf_counter() - t0:.1f} s (compilation included)")
        runs = []
        for r in range(args.repeats):
            seconds, tokens = 0.0, 0
            for _ in range(args.updates):
                t0 = time.perf_counter()
                result = train_step(ctx, [collate(train, next(batches), cfg.data.pad_to_multiple)])
                seconds += time.perf_counter() - t0
                tokens += result.ntokens
            runs.append((tokens / seconds, args.updates / seconds))
            print(f"  run {r + 1}: {runs[-1][0]:,.0f} target tokens/s, {runs[-1][1]:.3f} updates/s", flush=True)
    print(f"  median target tokens/s : {statistics.median(r[0] for r in runs):,.0f}")
    print(f"  median updates/s       : {statistics.median(r[1] for r in runs):.3f}")
    print(f"  peak RSS               : {resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024:,.0f} MiB")


if __name__ == "__main__":
    main()
