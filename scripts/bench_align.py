"""What word alignment costs beside decoding: the same sentences decoded once, then aligned with the encoder
outputs decoding kept (``mt.decode.align.EncoderRows``, what mt-serve does) and by encoding again, alternated.

    python scripts/bench_align.py --ckpt runs/m30k/checkpoints/averaged.pt [--lines 500] [--pairs 3]

Prints each pair's decoding time and each alignment's time and share of it, then the medians.
"""

from __future__ import annotations

import argparse
import gzip
import statistics
import time
from pathlib import Path

import torch

from mt.checkpoint import load_for_inference
from mt.decode import Translator
from mt.decode.align import EncoderRows

DATA = Path(__file__).resolve().parents[2] / "shared" / "data" / "multi30k" / "test_2016_flickr.en.gz"


def read(path: Path, count: int) -> list[str]:
    opener = gzip.open if path.suffix == ".gz" else open
    with opener(path, "rt", encoding="utf-8") as f:
        return [line.rstrip("\n") for line, _ in zip(f, range(count), strict=False)]


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--ckpt", type=Path, required=True)
    p.add_argument("--source-file", type=Path, default=DATA)
    p.add_argument("--lines", type=int, default=500)
    p.add_argument("--pairs", type=int, default=3, help="alternated pairs (kept, encoded / encoded, kept)")
    p.add_argument("--threads", type=int, default=0, help="torch threads (0: torch's default)")
    args = p.parse_args(argv)
    if args.threads:
        torch.set_num_threads(args.threads)
    model, tokenizers, cfg = load_for_inference(args.ckpt, pack=True, native=True)  # as mt-serve loads it
    translator = Translator(model, tokenizers, cfg.decode, max_positions=cfg.model.max_positions)
    lines = read(args.source_file, args.lines)
    shares: dict[str, list[float]] = {"kept": [], "encoded": []}
    for pair in range(args.pairs):
        rows = EncoderRows()
        start = time.perf_counter()
        translations = translator.translate_nbest(lines, scores=False, encoder_rows=rows)
        decoding = time.perf_counter() - start
        report = []
        for name in ("kept", "encoded") if pair % 2 == 0 else ("encoded", "kept"):
            start = time.perf_counter()
            translator.align(lines, translations, encoder_rows=rows if name == "kept" else None)
            seconds = time.perf_counter() - start
            shares[name].append(100 * seconds / decoding)
            report.append(f"{name} {seconds:.3f} s ({shares[name][-1]:.1f}%)")
        print(f"pair {pair + 1}: decoding {decoding:.2f} s, aligning: {', '.join(report)}", flush=True)
    print(f"medians: aligning with the kept encoder outputs {statistics.median(shares['kept']):.1f}% of the "
          f"decoding time, encoding again {statistics.median(shares['encoded']):.1f}%")


if __name__ == "__main__":
    main()
