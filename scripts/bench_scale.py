"""Scale benchmark: a WMT-size synthetic corpus through the whole data path, each stage's time and memory.

Usage (from the repo root): ``python scripts/bench_scale.py --pairs 4500000 [--results bench/scale.jsonl]``.

The corpus is made from Multi30k train (``--source-dir``) by a deterministic variation: pair ``k`` joins
two Multi30k pairs (``a`` and a seeded permutation of ``a``, a fresh permutation every 29k pairs), so
lines are not duplicates and are about as long as WMT's. It is written as plain ``.gz`` files in
``--files`` parts (``part1.en.gz``, ``part1.de.gz``, ...; read as one split with
``data.train_prefix=[part1,...]``), the way WMT's files arrive, plus ``valid`` and ``test`` made the
same way from Multi30k val and test, into ``--work-dir`` (default ``bench/scale-N``), and reused while
its settings are unchanged.

Each stage then runs in its own subprocess, from a fresh cache, so its peak RSS (``VmHWM``) is its own:
reading into Arrow, tokenizer training (sampled), binarization (``data.num_workers`` processes),
the cached re-run of the whole ``prepare_data``, one epoch of the training sampler's batches, and the
first ``--updates`` updates of ``transformer_small``. ``workers MiB`` is the largest worker process's
peak (binarization); ``base MiB`` is the stage process's RSS after imports and loading, before the
timed work. Timings mean something only on a quiet machine.
"""

from __future__ import annotations

import argparse
import contextlib
import gzip
import json
import os
import platform
import resource
import shutil
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
MULTI30K = REPO.parent / "shared" / "data" / "multi30k"
STAGES = ("read", "tokenizer", "binarize", "prepare_cached", "batches", "train")
MARK = "BENCH_SCALE_RESULT "


# ------------------------------------------------------------------------------------------ corpus


def _lines(path: Path) -> list[str]:
    with gzip.open(path, "rt", encoding="utf-8", newline="\n") as f:
        return f.read().split("\n")[:-1]


def joined_pairs(en: list[str], de: list[str], n: int, seed: int) -> Iterator[tuple[str, str]]:
    """``n`` pairs, each two source pairs joined: ``a`` with ``perm[a]``, a new permutation per pass."""
    import numpy as np

    rng = np.random.default_rng(seed)
    m = len(en)
    for start in range(0, n, m):
        order, partner = rng.permutation(m), rng.permutation(m)
        for a, b in zip(order[: n - start].tolist(), partner[: n - start].tolist(), strict=True):
            yield f"{en[a]} {en[b]}", f"{de[a]} {de[b]}"


def _write_split(directory: Path, prefix: str, pairs: Iterator[tuple[str, str]], count: int) -> None:
    with (
        gzip.open(directory / f"{prefix}.en.gz", "wt", encoding="utf-8", compresslevel=6, newline="\n") as en,
        gzip.open(directory / f"{prefix}.de.gz", "wt", encoding="utf-8", compresslevel=6, newline="\n") as de,
    ):
        for _, (src, tgt) in zip(range(count), pairs, strict=False):
            en.write(src + "\n")
            de.write(tgt + "\n")


def make_corpus(args: argparse.Namespace, corpus: Path) -> None:
    """Write the corpus into ``corpus`` unless the same settings made it already."""
    settings = {"pairs": args.pairs, "files": args.files, "seed": args.seed, "source": str(args.source_dir), "v": 1}
    stamp = corpus / "corpus.json"
    if stamp.is_file() and json.loads(stamp.read_text()) == settings:
        return
    shutil.rmtree(corpus, ignore_errors=True)
    corpus.mkdir(parents=True)
    src = args.source_dir
    train = joined_pairs(_lines(src / "train.en.gz"), _lines(src / "train.de.gz"), args.pairs, args.seed)
    per_file = -(-args.pairs // args.files)
    for k in range(args.files):
        _write_split(corpus, f"part{k + 1}", train, min(per_file, args.pairs - k * per_file))
    for prefix, name in (("valid", "val"), ("test", "test_2016_flickr")):
        en, de = _lines(src / f"{name}.en.gz"), _lines(src / f"{name}.de.gz")
        _write_split(corpus, prefix, joined_pairs(en, de, len(en), args.seed), len(en))
    stamp.write_text(json.dumps(settings))


# ------------------------------------------------------------------------------------------ stages


def _overrides(args: argparse.Namespace, work: Path) -> list[str]:
    parts = ",".join(f"part{k + 1}" for k in range(args.files))
    return [
        "experiment=wmt14_en_de_base", "name=bench_scale",  # WMT settings (noam, 4096-token batches), then:
        "data=multi30k", f"data.dir={work / 'corpus'}", f"data.train_prefix=[{parts}]",
        "data.valid_prefix=valid", "data.test_prefix=test", f"data.cache_dir={work / 'cache'}",
        f"data.vocab_size={args.vocab_size}", f"data.max_len={args.max_len}", f"data.max_tokens={args.max_tokens}",
        f"data.num_workers={args.num_workers}", f"data.tokenizer_sample_size={args.sample_size}",
        "model=transformer_small", f"train.run_dir={work / 'run'}", f"train.max_updates={args.updates}",
        "train.validate_every=1000000", "train.save_every=1000000", "train.valid_bleu=false",
        "train.test_at_end=false", "train.progress=false", "train.tensorboard=false", "train.log_every=10",
        "train.update_freq=1", "train.precision=fp32", "train.max_time_minutes=0", "train.max_epochs=0",
        "train.keep_last=1", "train.average_last=0", *args.override,
    ]  # fmt: skip


def _stage_work(stage: str, args: argparse.Namespace, work: Path) -> tuple[Callable[[], dict], dict]:
    """Set up ``stage`` (imports, loading: not timed) and return its timed work and facts about its input."""
    from mt.config import compose
    from mt.data import TokenBatchSampler, Tokenizers, prepare_data
    from mt.data.binarize import binarize_split, load_split, open_splits, plan_cache, save_tokenizers, train_tokenizers

    cfg = compose(_overrides(args, work))
    data = cfg.data
    if stage == "read":
        raws = open_splits(data)
        return lambda: {"rows": sum(len(raw.load()) for raw in raws.values())}, {}
    raws = open_splits(data)
    plan = plan_cache(data, raws)
    if stage == "tokenizer":
        train = raws["train"].load()  # the Arrow cache of the read stage: memory-mapped

        def tokenizer() -> dict:
            tokenizers = train_tokenizers(data, train)
            save_tokenizers(tokenizers, plan)
            return {"vocab": tokenizers.src.vocab_size}

        return tokenizer, {"rows": len(train)}
    if stage == "binarize":
        loaded = {s: raw.load() for s, raw in raws.items()}
        tokenizers = Tokenizers.load(plan.tokenizer_dir)

        def binarize() -> dict:
            for s, raw in loaded.items():
                binarize_split(s, raw, tokenizers, data, plan.split_dirs[s])
            return {"kept": len(load_split("train", plan))}

        return binarize, {}
    if stage == "prepare_cached":
        return lambda: {"pairs": len(prepare_data(data).splits["train"])}, {}
    if stage == "batches":
        train = load_split("train", plan)

        def batches() -> dict:
            sampler = TokenBatchSampler(
                train.src_lens, train.tgt_lens, data.max_tokens, seed=cfg.train.seed,
                pad_to_multiple=data.pad_to_multiple, shuffle_chunk=data.shuffle_chunk,
            )  # fmt: skip
            return {"batches": len(sampler.batches(0))}

        return batches, {}
    if stage == "train":
        from mt.train.trainer import Trainer

        shutil.rmtree(work / "run", ignore_errors=True)  # a fresh run, never a resume
        trainer = Trainer(cfg)  # prepares the data (cached) and builds the model
        return lambda: {"reason": trainer.run(progress=False), "updates": trainer.state.step}, {}  # + 1 valid loss
    raise ValueError(f"unknown stage {stage}")


def _mib(kib: float) -> float:
    return round(kib / 1024, 1)


def _status_fields_kib() -> dict[str, float]:
    """The ``kB`` fields of ``/proc/self/status`` (Linux; empty where /proc is missing)."""
    fields = {}
    with contextlib.suppress(OSError):
        for line in Path("/proc/self/status").read_text().splitlines():
            name, _, value = line.partition(":")
            if value.endswith(" kB"):
                fields[name] = float(value.split()[0])
    return fields


def _status_kib(field: str) -> float:
    """``VmHWM`` / ``VmRSS`` of this process in KiB (Linux); ``ru_maxrss`` where /proc is missing."""
    value = _status_fields_kib().get(field)
    return value if value is not None else float(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss)


def _cpu_seconds() -> float:
    me, kids = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    return me.ru_utime + me.ru_stime + kids.ru_utime + kids.ru_stime


class RssSplitPeaks:
    """Samples ``RssAnon`` (private memory) and ``RssFile`` + ``RssShmem`` (file pages mapped in, e.g.
    memory-mapped Arrow: page cache the kernel can drop) every 20 ms on a thread; keeps each peak in KiB.

    ``VmHWM`` counts both, so a stage that reads a memory-mapped file end to end shows the file's
    size in its peak RSS without holding that memory itself.
    """

    def __init__(self) -> None:
        self.anon = self.file = 0.0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._sample, daemon=True)

    def _sample(self) -> None:
        while not self._stop.wait(0.02):
            self._take_sample()

    def _take_sample(self) -> None:
        status = _status_fields_kib()  # one read of /proc/self/status per sample
        self.anon = max(self.anon, status.get("RssAnon", 0.0))
        self.file = max(self.file, status.get("RssFile", 0.0) + status.get("RssShmem", 0.0))  # tmpfs: shmem

    def __enter__(self) -> RssSplitPeaks:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()
        self._take_sample()  # the end counts too, however busy the machine kept the sampling thread


def run_stage(stage: str, args: argparse.Namespace, work: Path) -> None:
    """Child process: run one stage and print its measurements as one marked JSON line."""
    work_fn, facts = _stage_work(stage, args, work)
    base = _status_kib("VmRSS")
    wall0, cpu0 = time.perf_counter(), _cpu_seconds()
    with RssSplitPeaks() as split:
        facts.update(work_fn())
    wall, cpu = time.perf_counter() - wall0, _cpu_seconds() - cpu0
    workers = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss  # KiB, the largest reaped child
    result = {"stage": stage, "wall_s": round(wall, 2), "cpu_s": round(cpu, 2), "peak_mib": _mib(_status_kib("VmHWM")),
              "workers_mib": _mib(workers), "base_mib": _mib(base), "anon_peak_mib": _mib(split.anon),
              "file_peak_mib": _mib(split.file), **facts}  # fmt: skip
    print(MARK + json.dumps(result), flush=True)


# ------------------------------------------------------------------------------------------ driver


def _child(stage: str, argv: list[str]) -> dict:
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "HF_DATASETS_OFFLINE": "1", "TOKENIZERS_PARALLELISM": "false"}
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(REPO), env.get("PYTHONPATH", "")) if p)
    proc = subprocess.run([sys.executable, __file__, *argv, "--stage", stage], env=env, capture_output=True,
                          text=True, cwd=REPO)  # fmt: skip
    found = [line for line in proc.stdout.splitlines() if line.startswith(MARK)]
    if proc.returncode != 0 or not found:
        sys.stderr.write(proc.stdout[-4000:] + proc.stderr[-4000:])
        raise SystemExit(f"stage {stage} failed (exit {proc.returncode})")
    return json.loads(found[-1][len(MARK) :])


def _row(r: dict) -> str:
    return (f"{r['stage']:<15} {r['wall_s']:>9.2f} {r['cpu_s']:>9.2f} {r['peak_mib']:>13.1f} "
            f"{r['workers_mib']:>11.1f} {r['base_mib']:>9.1f} {r['anon_peak_mib']:>9.1f} "
            f"{r['file_peak_mib']:>9.1f}")  # fmt: skip


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description="Time and measure the mt data path on a synthetic N-pair corpus.")
    parser.add_argument("--pairs", type=int, required=True, help="training pairs of the synthetic corpus")
    parser.add_argument("--work-dir", type=Path, default=None, help="default: bench/scale-N under the repo")
    parser.add_argument("--results", type=Path, default=None, help="append one JSON line per run to this file")
    parser.add_argument("--source-dir", type=Path, default=MULTI30K, help="Multi30k: train/val/test_2016_flickr")
    parser.add_argument("--files", type=int, default=3, help="training files (prefixes) the corpus is split into")
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--vocab-size", type=int, default=8000)
    parser.add_argument("--sample-size", type=int, default=1_000_000, help="data.tokenizer_sample_size")
    parser.add_argument("--max-len", type=int, default=256)
    parser.add_argument("--max-tokens", type=int, default=4096)
    parser.add_argument("--num-workers", type=int, default=2)
    parser.add_argument("--updates", type=int, default=50, help="updates of transformer_small")
    parser.add_argument("--override", action="append", default=[], metavar="KEY=VALUE",
                        help="an extra Hydra override for every stage, e.g. train.device=cuda (repeatable)")
    parser.add_argument("--stage", choices=STAGES, help=argparse.SUPPRESS)  # internal: run one stage
    argv = sys.argv[1:] if argv is None else argv
    args = parser.parse_args(argv)
    if args.pairs < 1 or args.files < 1 or args.files > args.pairs:
        parser.error("need --pairs >= --files >= 1")
    work = (args.work_dir or REPO / "bench" / f"scale-{args.pairs}").resolve()
    if args.stage:
        run_stage(args.stage, args, work)
        return

    t0 = time.perf_counter()
    make_corpus(args, work / "corpus")
    print(f"corpus: {args.pairs} pairs in {args.files} files, {work / 'corpus'} ({time.perf_counter() - t0:.1f} s)")
    shutil.rmtree(work / "cache", ignore_errors=True)  # every stage from scratch
    print(f"{'stage':<15} {'wall s':>9} {'cpu s':>9} {'peak RSS MiB':>13} {'workers MiB':>11} {'base MiB':>9} "
          f"{'anon MiB':>9} {'file MiB':>9}")
    results = []
    for stage in STAGES:
        results.append(_child(stage, argv))
        print(_row(results[-1]), flush=True)
    per_m = 1e6 / args.pairs
    print(f"per million pairs (x {per_m:.2f}; memory grows with N only beyond the base, compare two sizes): "
          + ", ".join(f"{r['stage']} {r['wall_s'] * per_m:.1f} s wall / {r['cpu_s'] * per_m:.1f} s cpu"
                      for r in results if r["stage"] != "train"))  # fmt: skip
    if args.results is not None:
        row = {"time": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()), "host": platform.node(),
               "cpus": os.cpu_count(), "pairs": args.pairs, "args": {k: str(v) for k, v in vars(args).items()},
               "stages": results}  # fmt: skip
        args.results.parent.mkdir(parents=True, exist_ok=True)
        with args.results.open("a", encoding="utf-8") as f:
            f.write(json.dumps(row) + "\n")


if __name__ == "__main__":
    main()
