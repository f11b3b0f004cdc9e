"""Benchmark the data pipeline on Multi30k train: tokenizer training, binarization, loader throughput.

Usage (from the repo root, with ``mt`` installed by ``make install``):
``python scripts/bench_data.py [--data-dir ../shared/data/multi30k] [--vocab-size 8000] [--max-tokens 4096]
[--pad-to-multiple 8] [--subword-sampling 0.1]``. Every stage runs from scratch in a fresh temporary cache
directory. The sampled loader pass (``data.subword_sampling``, 0 = skipped) reports the pieces' growth and
how many micro-batches a sampled batch becomes under the same ``max_tokens``.
"""

from __future__ import annotations

import argparse
import tempfile
import time
from pathlib import Path

import datasets

from mt.config import DataConfig, ModelConfig
from mt.data import TokenBatchSampler, TokenizedSplit, collate, open_split, prepare_data, subword_sampling
from mt.data.binarize import binarize_split, train_tokenizers


def main() -> None:
    parser = argparse.ArgumentParser(description="Benchmark the mt data pipeline on Multi30k train.")
    parser.add_argument("--data-dir", default="../shared/data/multi30k")
    parser.add_argument("--vocab-size", type=int, default=8000)
    parser.add_argument("--max-tokens", type=int, default=4096)
    parser.add_argument("--num-workers", type=int, default=2)
    parser.add_argument("--pad-to-multiple", type=int, default=8)
    parser.add_argument("--subword-sampling", type=float, default=0.1, help="BPE-dropout p; 0 = no sampled pass")
    args = parser.parse_args()

    with tempfile.TemporaryDirectory(prefix="bench_data_") as cache:
        cfg = DataConfig(
            source="files", dir=args.data_dir, vocab_size=args.vocab_size, joint_vocab=True, max_len=128,
            max_tokens=args.max_tokens, valid_prefix="val", test_prefix="test_2016_flickr", cache_dir=cache,
            num_workers=args.num_workers, pad_to_multiple=args.pad_to_multiple, subword_sampling=args.subword_sampling,
        )  # fmt: skip
        t0 = time.perf_counter()
        raw = open_split(cfg, "train", Path(cache)).load()  # read, validate, write Arrow
        t1 = time.perf_counter()
        tokenizers = train_tokenizers(cfg, raw)
        t2 = time.perf_counter()
        out = Path(cache) / "bench" / "train"
        binarize_split("train", raw, tokenizers, cfg, out)
        split = TokenizedSplit("train", datasets.load_from_disk(str(out)))
        t3 = time.perf_counter()
        print(f"train: {len(raw)} pairs read, {len(split)} kept; joint BPE vocab {tokenizers.src.vocab_size}")
        print(f"read + validate:      {t1 - t0:7.2f} s")
        print(f"tokenizer training:   {t2 - t1:7.2f} s")
        print(f"binarization:         {t3 - t2:7.2f} s ({len(raw) / (t3 - t2):,.0f} pairs/s)")

        sampler = TokenBatchSampler(
            split.src_lens, split.tgt_lens, args.max_tokens, seed=1,
            pad_to_multiple=cfg.pad_to_multiple, shuffle_chunk=cfg.shuffle_chunk,
        )  # fmt: skip
        t4 = time.perf_counter()
        n_batches = n_tok = n_slots = 0
        for indices in sampler.iter_from(epoch=0):
            batch = collate(split, indices, cfg.pad_to_multiple)
            n_batches, n_tok, n_slots = n_batches + 1, n_tok + batch.ntokens, n_slots + batch.tgt_out.numel()
        dt = time.perf_counter() - t4
        print(f"loader, 1 epoch:      {dt:7.2f} s, {n_batches} batches, {n_batches / dt:,.0f} batches/s, "
              f"{n_tok / dt:,.0f} target tokens/s (max_tokens={args.max_tokens}, "
              f"target padding {1 - n_tok / n_slots:.1%})")  # fmt: skip
        sampling = subword_sampling(cfg, tokenizers, ModelConfig().max_positions)
        if sampling is not None:
            t8 = time.perf_counter()
            n_parts = s_tok = s_slots = 0
            for j, indices in enumerate(sampler.iter_from(epoch=0)):
                parts = sampling.collate(split, indices, (1, 0, j, 0))
                n_parts += len(parts)
                s_tok += sum(b.ntokens for b in parts)
                s_slots += sum(b.tgt_out.numel() for b in parts)
            ds = time.perf_counter() - t8
            print(f"sampled loader (p={cfg.subword_sampling}): {ds:6.2f} s, {ds / n_batches * 1e3:.1f} ms per batch "
                  f"(binarized {dt / n_batches * 1e3:.1f}), {n_parts / n_batches:.2f} micro-batches per batch, "
                  f"target tokens x{s_tok / n_tok:.2f}, padded target x{s_slots / n_slots:.2f} "
                  f"(target padding {1 - s_tok / s_slots:.1%})")  # fmt: skip

        t5 = time.perf_counter()
        prepare_data(cfg)  # all splits, from the cached Arrow text
        t6 = time.perf_counter()
        prepare_data(cfg)  # everything reused
        t7 = time.perf_counter()
        print(f"prepare_data, 3 splits: {t6 - t5:.2f} s first (text cached), {t7 - t6:.2f} s reused")


if __name__ == "__main__":
    main()
