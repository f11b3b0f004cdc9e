"""``make bench-peers``: training throughput of mt and fairseq 0.12 side by side, on Multi30k en->de.

    python scripts/bench_peers.py [--models transformer_small transformer_mini] [--pairs 3]
                                  [--updates-small 40] [--updates-mini 80] [--warmup 20] [--threads 2]
                                  [--mt-precisions bf16 fp32]
                                  [--peers-dir ../shared/peers] [--results bench/peers-results.jsonl]
                                  [--skip-build] [--force]

1. Builds fairseq's venv on first use (``setup_venv.sh`` of the peer harness, ``--peers-dir``, default
   ``<repo>/../shared/peers``; about 3 minutes once, under ``$PEERS_ROOT``) and its data (``prepare.sh``:
   joint 8k SentencePiece BPE, ``fairseq-preprocess``) when missing.
2. Refuses to start while another process uses more than half a core (``--force`` overrides): the two
   systems are compared on the same 2 cores, and a neighbour would skew whichever runs beside it.
3. For each of ``--pairs`` pairs and each model: fairseq, then mt in each of ``--mt-precisions`` (default bf16,
   the Multi30k preset's, then fp32, fairseq's), one process at a time (A B C A B C ...), each a fresh process
   under ``/usr/bin/time -v`` (peak RSS) doing ``--warmup`` untimed updates then the timed ones.
4. Prints each run, then medians over the pairs, and last one line per model,
   ``ratio <model>: X.XX`` (mt in the first of ``--mt-precisions`` / fairseq target tokens/s, medians), then
   ``ratio <model> (mt <precision>): X.XX`` for the others. Raw results go to ``--results`` (JSON lines).

Both sides: Multi30k en->de, joint 8k BPE, max_tokens 4096, dropout 0.3, shared embeddings, label smoothing 0.1,
Adam (0.9, 0.98), CPU, ``--threads`` threads, data loading in the training process, no validation and
no checkpoints. fairseq trains in fp32 (0.12's ``--bf16`` "implies --tpu"); mt in each of ``--mt-precisions``
(bf16: autocast; the softmax, loss and Adam in fp32; its loss parity with fp32: ``make bench-bf16``).
The lr schedule, warmup and clipping are each model's recipe (the peer README's), on both sides.
Padding: mt's Multi30k preset pads lengths to a multiple of 1 (``data.pad_to_multiple=1``); fairseq 0.12 pads
lengths to ``--required-seq-len-multiple`` (default 1) and rounds batch *sizes* (sentences, not lengths) down to
``--required-batch-size-multiple`` (default 8), so neither side pads beyond the longest sentence of a batch.
Each side trains its own joint 8k BPE on the same training text, so sentences are split into slightly
different piece counts; tokens/s counts each side's own target tokens (pieces + EOS, padding excluded), and
sentences/s (``bsz`` x ``ups`` per interval) is printed too, as it does not depend on the segmentation.
The 4096-token budget is filled by each side's own batching (both count ``batch size x`` the longest
sentence + EOS of either side): fairseq sorts by target then source length and cuts batch sizes to
multiples of 8, mt sorts by the longer side (within chunks) and keeps every sentence that fits, so the
target tokens per update differ; the run prints them (``tok, sentences per update``) beside the speeds.

The timers, over intervals of ``--interval`` updates (default 20, as ``--log-interval`` in ``train_fairseq.sh``):

- fairseq: its logged ``wps`` (and ``ups`` as ``wps / wpb``: fairseq rounds ``ups`` to 2 decimals) of each
  ``train_inner`` line after the warmup (its ``TimeMeter``s):
  wall time from the reset of the meters after the previous log line to their reading right after the
  interval's last ``train_step``: data iterator + collate, forward, loss, backward, gradient normalisation
  and norm, Adam step, lr update, fairseq's per-update metrics bookkeeping; not the printing of the line;
- mt: the same span, timed here with ``perf_counter`` around ``--interval`` consecutive updates: batch indices (a new
  epoch's batching when one ends), ``collate``, lr update, ``train_step`` (forward, loss, backward,
  gradient normalisation and norm, Adam step), the loop's bookkeeping; not its one printed line per interval.

A run's figure is the median over its intervals; the reported figure the median over the pairs.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import re
import shlex
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType

REPO = Path(__file__).resolve().parents[1]
LOG_INTERVAL = 20  # fairseq's --log-interval in train_fairseq.sh (the default of --interval)
BUSY_PERCENT = 50.0  # of one core
# fairseq spends no time on validation or checkpoints; mt's worker does neither.
FAIRSEQ_BENCH_ARGS = ("--no-save", "--disable-validation")
SUMMARY_KEYS = ("tokens_per_s", "updates_per_s", "sentences_per_s", "max_rss_mib", "tokens_per_update",
                "sentences_per_update")


@dataclass(frozen=True)
class ModelSpec:
    """One model, sized alike on both sides, with its training recipe (the peer README's)."""

    run: str  # fairseq RUN name: logs $PEERS_LOGS/train_<run>.{log,time}
    fairseq_args: tuple[str, ...]  # on top of train_fairseq.sh's 6+6, d 256 "bench-small"
    mt_overrides: tuple[str, ...]  # on top of experiment=multi30k_en_de_paper model=<name> model.dropout=0.3
    default_updates: int


MODELS = {
    "transformer_small": ModelSpec(
        run="bench-peers-small",
        fairseq_args=(),  # 6+6, d 256, ffn 1024, 4 heads; lr 7e-4, warmup 1000, no clipping
        mt_overrides=("optim.lr=0.0007", "optim.warmup_updates=1000", "optim.clip_norm=0"),
        default_updates=40,
    ),
    "transformer_mini": ModelSpec(
        run="bench-peers-mini",
        fairseq_args=(
            "--encoder-layers", "4", "--decoder-layers", "4", "--encoder-embed-dim", "128",
            "--decoder-embed-dim", "128", "--encoder-ffn-embed-dim", "256", "--decoder-ffn-embed-dim", "256",
            "--lr", "0.005", "--warmup-updates", "2000", "--warmup-init-lr", "1e-7", "--clip-norm", "25",
        ),
        mt_overrides=("optim.lr=0.005", "optim.warmup_updates=2000", "optim.warmup_init_lr=1e-7", "optim.clip_norm=25"),
        default_updates=80,
    ),
}


# ---- parsing (pure; tests/test_bench_peers.py) ---------------------------------------------------------


def log_values(line: str) -> dict[str, float]:
    """The numbers of a fairseq ``--log-format simple`` line, ``key=value`` and ``| key value`` alike."""
    values = {k: float(v) for k, v in re.findall(r"(\w+)=([-\d.e+]+)", line)}
    values.update({k: float(v) for k, v in re.findall(r"\| (\w+) ([-\d.e+]+)(?= \||$)", line)})
    return values


def fairseq_intervals(log_text: str, skip_updates: int) -> list[dict[str, float]]:
    """The ``train_inner`` lines of the last run in a train_fairseq.sh log ending after ``skip_updates``.

    Runs start with train_fairseq.sh's ``== <time> train <run>: ...`` line (the log is appended to).
    """
    lines = log_text.splitlines()
    starts = [i for i, line in enumerate(lines) if line.startswith("== ") and " train " in line]
    last_run = lines[starts[-1] :] if starts else lines
    inner = [log_values(line) for line in last_run if "| train_inner |" in line]
    return [d for d in inner if d.get("num_updates", 0) > skip_updates]


def exact_ups(interval: dict[str, float]) -> dict[str, float]:
    """``ups`` as ``wps / wpb`` (the same meters: updates / elapsed), since fairseq logs ups to 2 decimals only."""
    return {**interval, "ups": interval["wps"] / interval["wpb"], "ups_logged": interval["ups"]}


def proc_cpu_ticks(stat_line: str) -> int:
    """utime + stime (clock ticks) from a ``/proc/<pid>/stat`` line (the name may hold spaces and parens)."""
    fields = stat_line[stat_line.rindex(")") + 2 :].split()  # fields[0] is field 3 (state)
    return int(fields[11]) + int(fields[12])  # fields 14 and 15


def median_of(rows: list[dict], key: str) -> float:
    return statistics.median(row[key] for row in rows)


def run_figures(intervals: list[dict[str, float]]) -> dict[str, float]:
    """A run's figures: medians over its intervals (``wps``, ``ups``, ``wpb``, ``bsz`` each)."""
    return {
        "tokens_per_s": median_of(intervals, "wps"), "updates_per_s": median_of(intervals, "ups"),
        "sentences_per_s": statistics.median(d["bsz"] * d["ups"] for d in intervals),
        "tokens_per_update": median_of(intervals, "wpb"), "sentences_per_update": median_of(intervals, "bsz"),
    }


def ratio_lines(ratios: dict[str, dict[str, float]]) -> list[str]:
    """``ratio <model>: X.XX`` for each model's first mt system, ``ratio <model> (<system>): X.XX`` for the rest."""
    lines = []
    for name, by_system in ratios.items():
        for i, (system, ratio) in enumerate(by_system.items()):
            lines.append(f"ratio {name}: {ratio:.2f}  ({system} / fairseq)" if i == 0
                         else f"ratio {name} ({system}): {ratio:.2f}")
    return lines


# ---- the machine --------------------------------------------------------------------------------------


def _all_ticks() -> dict[int, int]:
    ticks = {}
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            ticks[int(stat.parent.name)] = proc_cpu_ticks(stat.read_text())
        except (OSError, ValueError, IndexError):
            continue  # gone meanwhile
    return ticks


def busy_processes(seconds: float = 2.0) -> list[tuple[int, float, str]]:
    """``(pid, % of one core, command line)`` of other processes above ``BUSY_PERCENT`` over ``seconds``."""
    before = _all_ticks()
    time.sleep(seconds)
    after = _all_ticks()
    hz = os.sysconf("SC_CLK_TCK")
    busy = []
    for pid, ticks in after.items():
        if pid == os.getpid() or pid not in before:
            continue
        percent = 100.0 * (ticks - before[pid]) / hz / seconds
        if percent > BUSY_PERCENT:
            try:
                cmd = Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
            except OSError:
                cmd = "?"
            busy.append((pid, percent, cmd.strip()[:160]))
    return busy


def worker_or_main(workers: dict[str, Callable[[dict], dict]], main: Callable[[], None]) -> None:
    """A benchmark script's entry point: as ``--worker ENGINE SPEC OUT`` a timed process that runs
    ``workers[ENGINE]`` on the settings SPEC (JSON) and writes its figures to OUT (JSON); else ``main()``."""
    if sys.argv[1:2] == ["--worker"]:
        engine, spec, out = sys.argv[2], json.loads(sys.argv[3]), Path(sys.argv[4])
        out.write_text(json.dumps(workers[engine](spec)), encoding="utf-8")
    else:
        main()


def refuse_if_busy(force: bool) -> None:
    """Exit with the busy processes listed when another process uses the CPU (a benchmark beside it would mean
    little); ``force`` skips the check."""
    busy = [] if force else busy_processes()
    if busy:
        listing = "\n".join(f"  pid {pid}: {pct:.0f}% CPU  {cmd}" for pid, pct, cmd in busy)
        raise SystemExit(f"refusing to benchmark: other processes are busy (> {BUSY_PERCENT:.0f}% of a core):\n"
                         f"{listing}\nwait for them to finish, or pass --force (the figures would then mean little)")


def peers_paths(peers_dir: Path) -> dict[str, Path]:
    """PEERS_ROOT, PEERS_VENV, PEERS_DATA, PEERS_LOGS exactly as the harness' common.sh resolves them."""
    names = ("PEERS_ROOT", "PEERS_VENV", "PEERS_DATA", "PEERS_LOGS")
    script = f'source "$1/common.sh" && printf "%s\\n" {" ".join("$" + n for n in names)}'
    out = subprocess.run(["bash", "-c", script, "_", str(peers_dir)], check=True, capture_output=True, text=True)
    return dict(zip(names, (Path(p) for p in out.stdout.splitlines()), strict=True))


def load_timing(peers_dir: Path) -> ModuleType:
    """The harness' ``timing.py`` (``/usr/bin/time -v`` runner and parser)."""
    spec = importlib.util.spec_from_file_location("peers_timing", peers_dir / "timing.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def thread_env(threads: int) -> dict[str, str]:
    return {**os.environ, "OMP_NUM_THREADS": str(threads), "MKL_NUM_THREADS": str(threads)}


def git_commit() -> str:
    out = subprocess.run(["git", "-C", str(REPO), "describe", "--always", "--dirty"], capture_output=True, text=True)
    return out.stdout.strip() or "unknown"


# ---- the two sides ------------------------------------------------------------------------------------


def run_fairseq(args: argparse.Namespace, name: str, updates: int, paths: dict[str, Path], timing: ModuleType) -> dict:
    """One fresh fairseq-train (train_fairseq.sh) run; its logged wps/ups after the warmup."""
    spec = MODELS[name]
    env = thread_env(args.threads) | {
        "RUN": spec.run, "RESET": "1", "MAX_UPDATE": str(args.warmup + updates),
        "EXTRA_ARGS": shlex.join([*spec.fairseq_args, *FAIRSEQ_BENCH_ARGS, "--log-interval", str(args.interval)]),
    }
    env.pop("BUDGET_MIN", None)
    out = args.work_dir / f"fairseq_{name}.out"
    t0 = time.monotonic()
    with out.open("w") as f:
        script = str(args.peers_dir / "train_fairseq.sh")
        rc = subprocess.call(["bash", script], stdout=f, stderr=subprocess.STDOUT, env=env)
    log = paths["PEERS_LOGS"] / f"train_{spec.run}.log"
    if rc != 0:
        raise SystemExit(f"fairseq-train failed (rc={rc}): see {log} and {out}")
    logged = fairseq_intervals(log.read_text(encoding="utf-8", errors="replace"), args.warmup)
    intervals = [exact_ups(d) for d in logged]
    if len(intervals) != updates // args.interval:
        expected = updates // args.interval
        raise SystemExit(f"expected {expected} timed train_inner lines in {log}, found {len(intervals)}")
    usage = timing.parse_time_v(paths["PEERS_LOGS"] / f"train_{spec.run}.time")
    return {
        **run_figures(intervals),
        "intervals": [{k: d[k] for k in ("num_updates", "wps", "ups", "ups_logged", "wpb", "bsz")} for d in intervals],
        "max_rss_mib": usage["max_rss_kb"] / 1024, "process_wall_s": usage.get("wall_s"),
        "wall_outer_s": time.monotonic() - t0, "log": str(log),
    }


def run_mt(args: argparse.Namespace, name: str, updates: int, timing: ModuleType, precision: str) -> dict:
    """One fresh mt worker process (this script, ``--mt-worker``) under /usr/bin/time -v."""
    result = args.work_dir / f"mt_{name}.json"
    cmd = [
        sys.executable, str(Path(__file__).resolve()), "--mt-worker", name, "--updates", str(updates),
        "--worker-precision", precision,
        "--warmup", str(args.warmup), "--interval", str(args.interval), "--threads", str(args.threads),
        "--data-dir", str(args.data_dir),
        "--cache-dir", str(args.cache_dir), "--worker-out", str(result),
    ]
    pythonpath = os.pathsep.join(filter(None, [str(REPO), os.environ.get("PYTHONPATH")]))  # this checkout's mt
    env = thread_env(args.threads) | {"PYTHONPATH": pythonpath}
    out, time_v = args.work_dir / f"mt_{name}.out", args.work_dir / f"mt_{name}.time"
    usage = timing.run_timed(cmd, str(out), str(time_v), env=env)
    intervals = json.loads(result.read_text())["intervals"]
    return {
        **run_figures(intervals), "intervals": intervals, "max_rss_mib": usage["max_rss_kb"] / 1024,
        "process_wall_s": usage.get("wall_s"), "wall_outer_s": usage["wall_outer_s"],
    }


def mt_worker(args: argparse.Namespace) -> None:
    """Warmup, then ``--updates`` timed updates in intervals of ``--interval``; the intervals as JSON."""
    import torch

    from mt.config import compose
    from mt.data import collate
    from mt.train.optim import set_lr
    from mt.train.schedule import learning_rate
    from mt.train.setup import build_components, step_context
    from mt.train.step import train_step

    torch.set_num_threads(args.threads)
    with tempfile.TemporaryDirectory() as tmp:
        cfg = compose([
            "experiment=multi30k_en_de_paper", f"model={args.mt_worker}", "model.dropout=0.3",  # as fairseq trains it
            *MODELS[args.mt_worker].mt_overrides, f"data.dir={args.data_dir}", f"data.cache_dir={args.cache_dir}",
            "data.vocab_size=8000", "data.max_tokens=4096", f"train.run_dir={tmp}/run", f"train.threads={args.threads}",
            f"train.precision={args.worker_precision}", "train.tensorboard=false", "train.progress=false",
        ])
        parts = build_components(cfg)  # a fresh run: nothing to resume
        ctx = step_context(parts)
        train = parts.data.splits["train"]

        def batches():  # epoch after epoch, as the trainer goes on
            epoch = 0
            while True:
                yield from parts.sampler.batches(epoch)
                epoch += 1

        stream = batches()

        def update(step: int) -> tuple[int, int, bool]:
            indices = next(stream)
            set_lr(parts.optimizer, learning_rate(step, cfg.optim, cfg.model.d_model))
            result = train_step(ctx, [collate(train, indices, cfg.data.pad_to_multiple)])
            return result.ntokens, len(indices), result.skipped is not None

        print(f"mt {args.mt_worker}: {cfg.train.precision}, pad_to_multiple {cfg.data.pad_to_multiple}, "
              f"{args.threads} threads", flush=True)
        for step in range(1, args.warmup + 1):
            update(step)
        intervals = []
        tokens = sentences = skipped = 0
        t0 = time.perf_counter()
        for step in range(args.warmup + 1, args.warmup + args.updates + 1):
            ntok, nsent, skip = update(step)
            tokens, sentences, skipped = tokens + ntok, sentences + nsent, skipped + skip
            if (step - args.warmup) % args.interval == 0:
                seconds = time.perf_counter() - t0
                intervals.append({
                    "num_updates": step, "wps": tokens / seconds, "ups": args.interval / seconds,
                    "wpb": tokens / args.interval, "bsz": sentences / args.interval, "skipped": skipped,
                })
                print(f"num_updates={step} wps={tokens / seconds:.1f} ups={args.interval / seconds:.3f}", flush=True)
                tokens = sentences = skipped = 0
                t0 = time.perf_counter()
    Path(args.worker_out).write_text(json.dumps({"intervals": intervals}))


# ---- the driver ---------------------------------------------------------------------------------------


def fmt(row: dict) -> str:
    return (f"{row['tokens_per_s']:8,.0f} target tok/s  {row['updates_per_s']:6.3f} updates/s  "
            f"{row['sentences_per_s']:6.1f} sentences/s  peak RSS {row['max_rss_mib']:6,.0f} MiB  "
            f"({row['tokens_per_update']:,.0f} tok, {row['sentences_per_update']:.0f} sentences per update)")


def prepare(args: argparse.Namespace) -> dict[str, Path]:
    """The venv (unless --skip-build) and fairseq's binarized data, built once."""
    if not args.skip_build:
        t0 = time.monotonic()
        subprocess.run(["bash", str(args.peers_dir / "setup_venv.sh")], check=True)
        print(f"venv check/build: {time.monotonic() - t0:.0f} s", flush=True)
    paths = peers_paths(args.peers_dir)
    if not (paths["PEERS_VENV"] / "bin" / "fairseq-train").exists():
        raise SystemExit(f"no fairseq-train in {paths['PEERS_VENV']}: run without --skip-build to build the venv")
    if not (paths["PEERS_DATA"] / "bin" / "dict.en.txt").exists():
        subprocess.run(["bash", str(args.peers_dir / "prepare.sh")], check=True, env=thread_env(args.threads))
    return paths


def parse_args() -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--models", nargs="+", default=list(MODELS), choices=list(MODELS))
    p.add_argument("--pairs", type=int, default=3, help="fairseq/mt pairs per model (alternated)")
    p.add_argument("--updates-small", type=int, default=MODELS["transformer_small"].default_updates)
    p.add_argument("--updates-mini", type=int, default=MODELS["transformer_mini"].default_updates)
    p.add_argument("--warmup", type=int, default=LOG_INTERVAL, help="untimed updates (multiple of --interval)")
    p.add_argument("--interval", type=int, default=LOG_INTERVAL, help="updates per timed interval")
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--mt-precisions", nargs="+", default=["bf16", "fp32"], choices=["fp32", "bf16"],
                   help="mt's train.precision, one run each per pair; the first gives the 'ratio <model>:' line")
    p.add_argument("--peers-dir", type=Path, default=REPO.parent / "shared" / "peers")
    p.add_argument("--data-dir", type=Path, default=REPO.parent / "shared" / "data" / "multi30k")
    p.add_argument("--cache-dir", type=Path, default=REPO / "data" / "cache", help="mt's data.cache_dir")
    p.add_argument("--results", type=Path, default=REPO / "bench" / "peers-results.jsonl")
    p.add_argument("--skip-build", action="store_true", help="do not run setup_venv.sh (the venv must exist)")
    p.add_argument("--force", action="store_true", help="start even if other processes are busy")
    p.add_argument("--mt-worker", choices=list(MODELS), help=argparse.SUPPRESS)
    p.add_argument("--updates", type=int, help=argparse.SUPPRESS)
    p.add_argument("--worker-out", help=argparse.SUPPRESS)
    p.add_argument("--worker-precision", default="fp32", help=argparse.SUPPRESS)
    args = p.parse_args()
    if args.mt_worker is None:
        counts = {"--warmup": args.warmup, "--updates-small": args.updates_small, "--updates-mini": args.updates_mini}
        for flag, n in counts.items():
            if args.interval <= 0 or n <= 0 or n % args.interval:
                p.error(f"{flag}={n}: must be a positive multiple of --interval={args.interval} "
                        f"(fairseq logs every --interval updates)")
        if args.pairs < 1:
            p.error(f"--pairs={args.pairs}: must be at least 1")
    return args


def main() -> None:
    args = parse_args()
    if args.mt_worker is not None:
        mt_worker(args)
        return
    args.peers_dir, args.cache_dir = args.peers_dir.resolve(), args.cache_dir.resolve()
    if not (args.peers_dir / "train_fairseq.sh").exists():
        raise SystemExit(f"no peer harness in {args.peers_dir} (train_fairseq.sh missing): give --peers-dir")
    refuse_if_busy(args.force)
    paths = prepare(args)
    timing = load_timing(args.peers_dir)
    updates = {"transformer_small": args.updates_small, "transformer_mini": args.updates_mini}
    args.results.parent.mkdir(parents=True, exist_ok=True)
    session = {"session": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()), "mt_commit": git_commit(),
               "threads": args.threads, "warmup": args.warmup, "interval": args.interval}
    systems = ["fairseq", *(f"mt {precision}" for precision in args.mt_precisions)]
    print(f"{args.pairs} pair(s), {args.warmup} warmup updates, intervals of {args.interval}, {args.threads} threads; "
          f"fairseq logs in {paths['PEERS_LOGS']}, results to {args.results}", flush=True)
    rows: list[dict] = []
    with tempfile.TemporaryDirectory(prefix="bench_peers_") as work, args.results.open("a") as results:
        args.work_dir = Path(work)
        for pair in range(1, args.pairs + 1):
            for name in args.models:
                for system in systems:
                    run = (run_fairseq(args, name, updates[name], paths, timing) if system == "fairseq"
                           else run_mt(args, name, updates[name], timing, system.split()[1]))
                    row = {**session, "kind": "run", "pair": pair, "model": name, "system": system,
                           "updates": updates[name], **run}
                    rows.append(row)
                    results.write(json.dumps(row) + "\n")
                    results.flush()
                    print(f"pair {pair} {name:17s} {system:9s}: {fmt(row)}", flush=True)
    print(f"\nmedians over {args.pairs} pair(s):")
    ratios = {}
    with args.results.open("a") as results:
        for name in args.models:
            med = {}
            for system in systems:
                mine = [r for r in rows if r["model"] == name and r["system"] == system]
                med[system] = {k: median_of(mine, k) for k in SUMMARY_KEYS}
                print(f"  {name:17s} {system:9s}: {fmt(med[system])}")
            ratios[name] = {s: med[s]["tokens_per_s"] / med["fairseq"]["tokens_per_s"] for s in systems[1:]}
            summary = {**session, "kind": "summary", "model": name, "pairs": args.pairs, "updates": updates[name],
                       "medians": med, "ratio_tokens_per_s": ratios[name]}
            results.write(json.dumps(summary) + "\n")
    print()
    print("\n".join(ratio_lines(ratios)))


if __name__ == "__main__":
    main()
