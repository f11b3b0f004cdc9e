"""CTranslate2 decoding throughput of a checkpoint, to alternate with ``scripts/bench_decode.py`` (mt itself).

    python scripts/bench_ct2.py --ckpt runs/multi30k_en_de/checkpoints/best.pt        # 1000 sentences
    python scripts/bench_ct2.py --ckpt best.pt --n 20 --repeats 1                      # a smoke run

1. Converts the checkpoint with ``mt-export --to ctranslate2`` twice, float32 and ``--quantization int8``
   (into ``--models DIR`` if given, reused when already there; else a temporary directory).
2. Times each engine in its own fresh ``python`` process that never imports torch (it checks), with
   ``OMP_NUM_THREADS`` and ``intra_threads`` = ``--threads``, ``inter_threads`` = 1: beam ``--beam`` and
   greedy, alternated ``--repeats`` times, the timer and the CPU clock (``time.process_time``, all
   threads) around ``translate_batch`` only. Sources are SentencePiece pieces; the model adds ``</s>``.
3. Prints one line per engine and search, as bench_decode prints one per search:
   ``ct2-float32 beam4: N sentences in W s = X sentences/s, Y target tokens/s, C CPU s (...)``, then
   medians, then the worker process's wall and CPU time. ``--check`` then runs mt (in this process,
   after all timing) with the same settings and prints how many float32 outputs equal mt's.

Same work as bench_decode, and where it differs by design:

- batches: up to ``--max-sentences`` (64) sentences, sorted by length (CTranslate2's ``max_batch_size``
  sorts and cuts; mt sorts and cuts under ``decode.max_tokens`` too, which Multi30k never reaches);
- length penalty: ``|Y|^alpha`` with the checkpoint's alpha (|Y| counting ``</s>`` in both). A checkpoint
  with mt's default GNMT penalty ranks by ``((5+|Y|)/6)^alpha`` in bench_decode: same work, other ties;
- stopping: with a penalty, CTranslate2 ends a sentence once ``beam`` hypotheses are finished (fairseq's
  rule); mt ends it when the best candidate is ``</s>`` (or no live beam can win). Greedy: at ``</s>``;
- length limit: mt allows ``floor(a * |src| + b)`` pieces per sentence (at most max_positions - 1) and
  then forces ``</s>``; CTranslate2 has one ``max_decoding_length`` per call: the largest of those limits
  over the input. The workers count outputs longer than their sentence's mt limit (expected 0);
- tokens: target tokens are the generated pieces plus ``</s>`` when it was generated (as mt counts).
"""

from __future__ import annotations

import argparse
import gzip
import itertools
import json
import math
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

START = time.perf_counter()
DEFAULT_INPUT = Path(__file__).resolve().parents[2] / "shared/data/multi30k/test_2016_flickr.en.gz"
ENGINES = {"ct2-float32": (None, "float32"), "ct2-int8": ("int8", "int8")}  # name: (quantization, compute_type)


def read_lines(path: Path, n: int) -> list[str]:
    """The first ``n`` lines of a plain or .gz text file (no mt import: the worker must not load torch)."""
    opener = gzip.open if path.suffix == ".gz" else open
    with opener(path, "rt", encoding="utf-8") as f:
        return [line.rstrip("\n") for line in itertools.islice(f, n)]


# ---- the worker: ctranslate2 + sentencepiece only ------------------------------------------------


def worker(spec: dict) -> None:
    import ctranslate2
    import sentencepiece as spm

    model = Path(spec["model"])
    joint = (model / "spm.model").exists()  # else src.model and tgt.model (mt.data.Tokenizers.save)
    sp = spm.SentencePieceProcessor(model_file=str(model / ("spm.model" if joint else "src.model")))
    target_sp = sp if joint else spm.SentencePieceProcessor(model_file=str(model / "tgt.model"))
    lines = read_lines(Path(spec["input"]), spec["n"])
    sources = [sp.encode(line, out_type=str)[: spec["max_src_len"]] for line in lines]
    limits = [min(max(1, math.floor(spec["max_len_a"] * len(s) + spec["max_len_b"])), spec["max_positions"] - 1)
              for s in sources]
    translator = ctranslate2.Translator(str(model), device="cpu", compute_type=spec["compute_type"],
                                        intra_threads=spec["threads"], inter_threads=1)
    name, results, outputs = spec["name"], {}, {}
    for _ in range(spec["repeats"]):  # alternate the two searches, so machine drift hits both alike
        for label, beam in ((f"beam{spec['beam']}", spec["beam"]), ("greedy", 1)):
            wall, cpu = time.perf_counter(), time.process_time()
            out = translator.translate_batch(
                sources, max_batch_size=spec["max_sentences"], batch_type="examples", beam_size=beam,
                length_penalty=spec["alpha"], max_decoding_length=max(limits),
                max_input_length=spec["max_positions"], return_end_token=True,
            )
            wall, cpu = time.perf_counter() - wall, time.process_time() - cpu
            hyps = [r.hypotheses[0] for r in out]
            tokens = sum(len(h) for h in hyps)  # pieces + </s> where generated
            over = sum(len(h) - (h[-1:] == ["</s>"]) > limit for h, limit in zip(hyps, limits, strict=True))
            print(f"{name} {label:>6}: {len(lines)} sentences in {wall:.2f} s = {len(lines) / wall:.1f} sentences/s, "
                  f"{tokens / wall:.0f} target tokens/s, {cpu:.2f} CPU s (mean output {tokens / len(lines):.1f} "
                  f"tokens incl. </s>; {over} past mt's limit)", flush=True)
            results.setdefault(label, []).append((len(lines) / wall, tokens / wall, cpu))
            outputs[label] = [target_sp.decode([p for p in h if p != "</s>"]) for h in hyps]
    for label, runs in results.items():
        sents, toks, cpu = (statistics.median(r[i] for r in runs) for i in range(3))
        print(f"median {name} {label}: {sents:.1f} sentences/s, {toks:.0f} target tokens/s, {cpu:.2f} CPU s "
              f"({len(runs)} runs)")
    if "torch" in sys.modules:
        raise SystemExit("bench_ct2 worker: torch was imported; the timing is not of CTranslate2 alone")
    print(f" {name} process: {time.perf_counter() - START:.1f} s wall, {time.process_time():.1f} s CPU "
          f"(ctranslate2 {ctranslate2.__version__}, no torch)", flush=True)
    Path(spec["outputs"]).write_text(json.dumps(outputs), encoding="utf-8")


# ---- the parent: export, run the workers, optionally check against mt -------------------------


def export_models(ckpt: Path, models: Path) -> None:
    from mt.export import export_ctranslate2

    for name, (quantization, _) in ENGINES.items():
        if not (models / name / "model.bin").exists():
            export_ctranslate2(ckpt, models / name, quantization, force=True)


def run_workers(args: argparse.Namespace, models: Path, settings: dict) -> dict[str, dict[str, list[str]]]:
    env = dict(os.environ, OMP_NUM_THREADS=str(args.threads))
    outputs = {}
    for name, (_, compute_type) in ENGINES.items():
        spec = dict(settings, name=name, model=str(models / name), compute_type=compute_type,
                    outputs=str(models / f"{name}.outputs.json"))
        subprocess.run([sys.executable, __file__, "--worker", json.dumps(spec)], env=env, check=True)
        outputs[name] = json.loads(Path(spec["outputs"]).read_text(encoding="utf-8"))
    return outputs


def check_against_mt(args: argparse.Namespace, lines: list[str], outputs: dict[str, list[str]], beam: int) -> None:
    import dataclasses

    import torch

    from mt.checkpoint import load_for_inference
    from mt.decode import Translator

    torch.set_num_threads(args.threads)
    model, tokenizers, cfg = load_for_inference(args.ckpt, pack=True)
    for label, strategy in ((f"beam{beam}", "beam"), ("greedy", "greedy")):
        decode = dataclasses.replace(cfg.decode, strategy=strategy, beam_size=beam, nbest=1,
                                     length_penalty="length" if cfg.decode.length_penalty == "gnmt" else
                                     cfg.decode.length_penalty, max_sentences=args.max_sentences)
        ours = Translator(model, tokenizers, decode, "cpu", max_positions=cfg.model.max_positions).translate(lines)
        same = sum(a == b for a, b in zip(outputs[label], ours, strict=True))
        print(f"ct2-float32 {label} outputs equal to mt's ({decode.length_penalty}, alpha {decode.alpha}): "
              f"{same}/{len(lines)}")


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--ckpt", type=Path, required=True)
    p.add_argument("--input", type=Path, default=DEFAULT_INPUT)
    p.add_argument("--n", type=int, default=1000, help="sentences (the first N of --input)")
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--beam", type=int, default=4)
    p.add_argument("--max-sentences", type=int, default=64)
    p.add_argument("--repeats", type=int, default=3, help="runs of each search; the median is reported")
    p.add_argument("--models", type=Path, help="keep the exported models here (reused when present)")
    p.add_argument("--check", action="store_true", help="after timing, compare the float32 outputs with mt's")
    args = p.parse_args()
    from mt.checkpoint import load_checkpoint
    from mt.config import to_config
    from mt.export.common import search_defaults

    cfg = to_config(load_checkpoint(args.ckpt)["config"])
    defaults = search_defaults(cfg)
    settings = dict(input=str(args.input), n=args.n, threads=args.threads, beam=args.beam, repeats=args.repeats,
                    max_sentences=args.max_sentences, alpha=defaults.length_penalty, max_len_a=cfg.decode.max_len_a,
                    max_len_b=cfg.decode.max_len_b, max_positions=cfg.model.max_positions,
                    max_src_len=cfg.model.max_positions - 1)
    lines = read_lines(args.input, args.n)
    print(f"{len(lines)} sentences from {args.input}, {args.threads} threads, beam {args.beam} and greedy, "
          f"length penalty |Y|^{defaults.length_penalty} (checkpoint: {cfg.decode.length_penalty} "
          f"{cfg.decode.alpha}), limit {cfg.decode.max_len_a}*|src|+{cfg.decode.max_len_b}", flush=True)
    with tempfile.TemporaryDirectory() as tmp:
        models = args.models or Path(tmp)
        export_models(args.ckpt, models)
        outputs = run_workers(args, models, settings)
    if args.check:
        check_against_mt(args, lines, outputs["ct2-float32"], args.beam)


if __name__ == "__main__":
    if sys.argv[1:2] == ["--worker"]:  # the timed process: its settings as one JSON argument
        worker(json.loads(sys.argv[2]))
    else:
        main()
