"""``make bench-finetune``: fine-tuning throughput of the OPUS-MT shape, mt against transformers' Seq2SeqTrainer.

    python scripts/bench_finetune.py [--pairs 2] [--precisions fp32 bf16] [--pairs-n 4000] [--batch 64]
                                     [--warmup 5] [--updates 20] [--threads 2] [--force] [--smoke]

The model: the OPUS-MT shape (``opus_mt_shape.py``: opus-mt-en-de's configuration, SiLU, 58,101 pieces, random
weights) as a transformers directory; mt fine-tunes ``mt-import``'s checkpoint of it (``train.init_from``, the
``finetune`` preset's optimizer: Adam, label smoothing 0.1), transformers the directory itself with
``Seq2SeqTrainer`` (AdamW, ``label_smoothing_factor=0.1``, length-grouped batches). The data: the first
``--pairs-n`` Multi30k training pairs, tokenized on both sides by the directory's own tokenizers (mt's import
numbers the pieces as ``MarianTokenizer`` does). Batches: mt batches by tokens (``--batch`` times 16 tokens,
about ``--batch`` Multi30k sentences); transformers then takes as many sentences a step as mt's batches held
on average in the same pair (both sides' sentences and target tokens per update are printed). Neither clips
gradients, validates or saves.

For each of ``--pairs`` pairs and each of ``--precisions``: mt, then transformers, each a fresh process on
``--threads`` threads, ``--warmup`` untimed updates, then ``--updates`` timed: target tokens (pieces + EOS,
padding excluded) per second of wall time over the timed updates. Prints each run, each pair's mt /
transformers ratio, and last ``ratio finetune <precision>: X.XX`` (the median of the pairs' ratios).
``--smoke`` (the test's): the tiny network of ``opus_mt_shape.SMOKE``, few updates, 1 pair, no busy check.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from bench_peers import git_commit, refuse_if_busy, thread_env, worker_or_main
from opus_mt_shape import mt_import, opus_mt_directory, read_gz

REPO = Path(__file__).resolve().parents[1]
ENGINES = ("mt", "hf")
TOKENS_PER_SENTENCE = 16  # Multi30k pieces + EOS of the longer side, about: mt's budget is --batch times this


def training_pairs(data_dir: Path, n: int) -> tuple[list[str], list[str]]:
    return read_gz(data_dir / "train.en.gz")[:n], read_gz(data_dir / "train.de.gz")[:n]


def mt_worker(spec: dict) -> dict:
    """mt's fine-tuning updates, timed as ``scripts/bench_peers.py`` times them."""
    import torch

    from mt.config import compose
    from mt.data import collate
    from mt.train.optim import set_lr
    from mt.train.schedule import learning_rate
    from mt.train.setup import build_components, step_context
    from mt.train.step import train_step

    torch.set_num_threads(spec["threads"])
    with tempfile.TemporaryDirectory() as tmp:
        data = Path(tmp) / "data"
        data.mkdir()
        english, german = training_pairs(Path(spec["data_dir"]), spec["pairs_n"])
        for lang, lines in (("en", english), ("de", german)):
            for prefix in ("train", "val", "test"):
                (data / f"{prefix}.{lang}").write_text("\n".join(lines if prefix == "train" else lines[:8]) + "\n")
        cfg = compose([
            "experiment=finetune", f"train.init_from={spec['ckpt']}", f"data.dir={data}", "data.train_prefix=[train]",
            "data.test_prefix=test", f"data.max_tokens={spec['batch'] * TOKENS_PER_SENTENCE}",
            f"data.cache_dir={tmp}/cache", f"train.run_dir={tmp}/run", f"train.threads={spec['threads']}",
            f"train.precision={spec['precision']}", "train.tensorboard=false", "train.progress=false",
        ])
        parts = build_components(cfg)
        ctx = step_context(parts)
        train = parts.data.splits["train"]
        stream = (indices for epoch in range(10**6) for indices in parts.sampler.batches(epoch))

        def update(step: int) -> tuple[int, int]:
            indices = next(stream)
            set_lr(parts.optimizer, learning_rate(step, cfg.optim, cfg.model.d_model))
            result = train_step(ctx, [collate(train, indices, cfg.data.pad_to_multiple)])
            return result.ntokens, len(indices)

        for step in range(1, spec["warmup"] + 1):
            update(step)
        tokens = sentences = 0
        start = time.perf_counter()
        for step in range(spec["warmup"] + 1, spec["warmup"] + spec["updates"] + 1):
            ntok, nsent = update(step)
            tokens, sentences = tokens + ntok, sentences + nsent
        return figures(tokens, sentences, spec["updates"], time.perf_counter() - start)


def hf_worker(spec: dict) -> dict:
    """transformers' Seq2SeqTrainer on the same directory and pairs; the timed updates' target tokens."""
    import datasets
    import torch
    import transformers

    torch.set_num_threads(spec["threads"])
    transformers.utils.logging.disable_progress_bar()
    directory = Path(spec["hf_dir"])
    tokenizer = transformers.AutoTokenizer.from_pretrained(directory)
    model = transformers.MarianMTModel.from_pretrained(directory)
    english, german = training_pairs(Path(spec["data_dir"]), spec["pairs_n"])
    encoded = datasets.Dataset.from_dict(dict(tokenizer(english, text_target=german)))
    clock = {"tokens": 0, "sentences": 0, "start": None, "steps": 0}

    class Timed(transformers.Seq2SeqTrainer):
        def training_step(self, model, inputs, num_items_in_batch=None):
            clock["steps"] += 1
            if clock["steps"] == spec["warmup"] + 1:
                clock["start"] = time.perf_counter()
            if clock["steps"] > spec["warmup"]:
                clock["tokens"] += int((inputs["labels"] != -100).sum())
                clock["sentences"] += int(inputs["labels"].size(0))
            return super().training_step(model, inputs, num_items_in_batch)

    with tempfile.TemporaryDirectory() as tmp:
        arguments = transformers.Seq2SeqTrainingArguments(
            output_dir=tmp, per_device_train_batch_size=spec["batch"], max_steps=spec["warmup"] + spec["updates"],
            learning_rate=2e-4, warmup_steps=spec["warmup"], label_smoothing_factor=0.1, max_grad_norm=0.0,
            train_sampling_strategy="group_by_length", save_strategy="no", report_to=[], logging_strategy="no",
            use_cpu=True, bf16=spec["precision"] == "bf16", dataloader_num_workers=0, seed=1,
        )
        collator = transformers.DataCollatorForSeq2Seq(tokenizer, model=model)
        trainer = Timed(model=model, args=arguments, train_dataset=encoded, data_collator=collator)
        trainer.train()
    end = time.perf_counter()
    return figures(clock["tokens"], clock["sentences"], spec["updates"], end - clock["start"])


def figures(tokens: int, sentences: int, updates: int, seconds: float) -> dict:
    return {"tokens_per_s": tokens / seconds, "tokens_per_update": tokens / updates,
            "sentences_per_update": sentences / updates, "seconds": seconds}


def run_worker(engine: str, spec: dict, work_dir: Path) -> dict:
    out = work_dir / f"{engine}.json"
    pythonpath = os.pathsep.join(filter(None, [str(REPO), os.environ.get("PYTHONPATH")]))
    env = thread_env(spec["threads"]) | {"PYTHONPATH": pythonpath, "HF_HUB_OFFLINE": "1",
                                         "HF_DATASETS_OFFLINE": "1", "TRANSFORMERS_VERBOSITY": "error"}
    cmd = [sys.executable, str(Path(__file__).resolve()), "--worker", engine, json.dumps(spec), str(out)]
    subprocess.run(cmd, env=env, check=True)
    return json.loads(out.read_text(encoding="utf-8"))


def parse_args() -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--data-dir", type=Path, default=REPO.parent / "shared" / "data" / "multi30k")
    p.add_argument("--work-dir", type=Path, default=REPO / "runs" / "bench_finetune")
    p.add_argument("--results", type=Path, default=REPO / "bench" / "finetune-results.jsonl")
    p.add_argument("--pairs", type=int, default=2, help="mt/transformers pairs per precision (alternated)")
    p.add_argument("--precisions", nargs="+", choices=("fp32", "bf16"), default=["fp32", "bf16"])
    p.add_argument("--pairs-n", type=int, default=4000, help="training pairs (the first N of Multi30k)")
    p.add_argument("--batch", type=int, default=64, help="about this many sentences per update (see above)")
    p.add_argument("--warmup", type=int, default=5)
    p.add_argument("--updates", type=int, default=20)
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--force", action="store_true", help="start even if other processes are busy")
    p.add_argument("--smoke", action="store_true", help="a tiny network, 1 pair, few updates (the test's)")
    args = p.parse_args()
    if args.smoke:
        args.pairs, args.pairs_n, args.batch, args.warmup, args.updates, args.force = 1, 200, 16, 1, 2, True
        args.precisions = args.precisions[:1]
    return args


def main() -> None:
    args = parse_args()
    refuse_if_busy(args.force)
    args.work_dir.mkdir(parents=True, exist_ok=True)
    hf_dir = opus_mt_directory(args.work_dir / "opus-mt-shape", args.data_dir, smoke=args.smoke)
    ckpt = mt_import(hf_dir, args.work_dir / "opus.pt")
    common = dict(ckpt=str(ckpt), hf_dir=str(hf_dir), data_dir=str(args.data_dir), pairs_n=args.pairs_n,
                  batch=args.batch, warmup=args.warmup, updates=args.updates, threads=args.threads)
    session = {"time": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()), "mt_commit": git_commit(), **common}
    print(f"{args.pairs} pair(s), {args.threads} threads, the OPUS-MT shape, {args.pairs_n} pairs, "
          f"{args.batch} sentences a step, {args.warmup} + {args.updates} updates", flush=True)
    ratios: dict[str, list[float]] = {p: [] for p in args.precisions}
    args.results.parent.mkdir(parents=True, exist_ok=True)
    with args.results.open("a") as results:
        for pair in range(1, args.pairs + 1):
            for precision in args.precisions:
                speed, batch = {}, args.batch
                for engine in ENGINES:  # mt first: transformers then takes its sentences per update
                    fig = run_worker(engine, common | {"precision": precision, "batch": batch}, args.work_dir)
                    batch = max(1, round(fig["sentences_per_update"]))
                    speed[engine] = fig["tokens_per_s"]
                    results.write(json.dumps({**session, "pair": pair, "precision": precision, "engine": engine,
                                              **fig}) + "\n")
                    print(f"pair {pair} {precision} {engine}: {fig['tokens_per_s']:8.0f} target tok/s "
                          f"({fig['tokens_per_update']:.0f} tok, {fig['sentences_per_update']:.1f} sentences per "
                          f"update; {fig['seconds']:.1f} s)", flush=True)
                ratios[precision].append(speed["mt"] / speed["hf"])
    for precision, values in ratios.items():
        print(f"pair by pair {precision}: {' '.join(f'{r:.2f}' for r in values)}")
    for precision, values in ratios.items():
        print(f"ratio finetune {precision}: {statistics.median(values):.2f}")


if __name__ == "__main__":
    worker_or_main({"mt": mt_worker, "hf": hf_worker}, main)
