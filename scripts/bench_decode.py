"""Decoding throughput on Multi30k test2016 (1000 sentences): beam 4 and greedy, 2 threads.

    python scripts/bench_decode.py --ckpt runs/multi30k_en_de/checkpoints/best.pt
    python scripts/bench_decode.py --random-model transformer_small --vocab 8000 [--n 50]
    python scripts/bench_decode.py --ckpt ... --stopping topk_eos --min-len 0   # the work of 605b6c4

Batches of up to ``--max-sentences`` (64) sentences under the checkpoint's ``decode.max_tokens``.
Prints sentences/s and target tokens/s with a timer around decoding only, plus the whole process's
wall and CPU time. A random model rarely emits EOS, so its outputs run to the maximum length
(``a * |src| + b``): its numbers are rough upper bounds of the work per sentence, nothing more. The
random model reads words through a hashing tokenizer (one id per whitespace-separated word), so it
needs no trained SentencePiece model.
"""

from __future__ import annotations

import argparse
import dataclasses
import statistics
import time
import zlib
from pathlib import Path

START = time.perf_counter()

import torch  # noqa: E402

from mt.config import DecodeConfig, compose  # noqa: E402
from mt.data import read_lines  # noqa: E402
from mt.decode import Translator  # noqa: E402
from mt.decode.stopping import STOPPING_RULES  # noqa: E402

DEFAULT_INPUT = Path(__file__).resolve().parents[2] / "shared/data/multi30k/test_2016_flickr.en.gz"


class HashTokenizer:
    """Whitespace words -> ids in [4, vocab) by CRC32; ids decode to ``<id>`` (random-model benchmarks)."""

    def __init__(self, vocab_size: int) -> None:
        self.vocab_size = vocab_size

    def encode(self, text: str) -> list[int]:
        return [4 + zlib.crc32(word.encode()) % (self.vocab_size - 4) for word in text.split()]

    def decode(self, ids: list[int]) -> str:
        return " ".join(f"<{i}>" for i in ids)


def random_model(name: str, vocab: int) -> tuple[torch.nn.Module, object, DecodeConfig, int]:
    from types import SimpleNamespace

    from mt.model import build_model

    cfg = compose([f"model={name}"])
    torch.manual_seed(1)
    model = build_model(cfg.model, vocab, vocab)
    tokenizer = HashTokenizer(vocab)
    return model, SimpleNamespace(src=tokenizer, tgt=tokenizer, joint=True), cfg.decode, cfg.model.max_positions


def from_checkpoint(path: Path) -> tuple[torch.nn.Module, object, DecodeConfig, int]:
    from mt.checkpoint import load_for_inference

    model, tokenizers, cfg = load_for_inference(path, "cpu", pack=True)
    return model, tokenizers, cfg.decode, cfg.model.max_positions


def bench(translator: Translator, lines: list[str], label: str) -> tuple[float, float]:
    """Decode ``lines`` once; print and return (sentences/s, target tokens/s)."""
    start = time.perf_counter()
    translations = translator.translate_nbest(lines)
    wall = time.perf_counter() - start
    tgt = sum(t.tgt_tokens for t in translations)
    print(
        f"{label:>8}: {len(lines)} sentences in {wall:.2f} s = {len(lines) / wall:.1f} sentences/s, "
        f"{tgt / wall:.0f} target tokens/s (mean output {tgt / len(lines):.1f} tokens incl. EOS)",
        flush=True,
    )
    return len(lines) / wall, tgt / wall


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    source = p.add_mutually_exclusive_group(required=True)
    source.add_argument("--ckpt", type=Path)
    source.add_argument("--random-model", metavar="MODEL_CONFIG", help="e.g. transformer_small")
    p.add_argument("--vocab", type=int, default=8000, help="vocabulary of the random model")
    p.add_argument("--input", type=Path, default=DEFAULT_INPUT)
    p.add_argument("--n", type=int, default=1000, help="sentences (the first N of --input)")
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--beam", type=int, default=4)
    p.add_argument("--max-sentences", type=int, default=64)
    p.add_argument("--repeats", type=int, default=3, help="runs of each search; the median is reported")
    p.add_argument("--stopping", choices=STOPPING_RULES, help="beam stopping rule (default: the config's)")
    p.add_argument("--min-len", type=int, help="pieces before EOS is allowed (default: config)")
    args = p.parse_args()

    torch.set_num_threads(args.threads)
    if args.ckpt is not None:
        model, tokenizers, decode, max_positions = from_checkpoint(args.ckpt)
    else:
        model, tokenizers, decode, max_positions = random_model(args.random_model, args.vocab)
    lines = list(read_lines(args.input))[: args.n]
    print(f"{len(lines)} sentences from {args.input}, {args.threads} threads, torch {torch.__version__}")
    results: dict[str, list[tuple[float, float]]] = {}
    for _ in range(args.repeats):  # alternate the two searches, so machine drift hits both alike
        for label, strategy in ((f"beam{args.beam}", "beam"), ("greedy", "greedy")):
            cfg = dataclasses.replace(
                decode, strategy=strategy, beam_size=args.beam, nbest=1, max_sentences=args.max_sentences
            )
            if args.stopping is not None:
                cfg = dataclasses.replace(cfg, stopping=args.stopping)
            if args.min_len is not None:
                cfg = dataclasses.replace(cfg, min_len=args.min_len)
            translator = Translator(model, tokenizers, cfg, "cpu", max_positions=max_positions)
            results.setdefault(label, []).append(bench(translator, lines, label))
    for label, runs in results.items():
        sents, toks = statistics.median(r[0] for r in runs), statistics.median(r[1] for r in runs)
        print(f"median {label}: {sents:.1f} sentences/s, {toks:.0f} target tokens/s ({len(runs)} runs)")
    print(f" process: {time.perf_counter() - START:.1f} s wall, {time.process_time():.1f} s CPU")


if __name__ == "__main__":
    main()
