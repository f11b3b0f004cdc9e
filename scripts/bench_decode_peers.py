"""``make bench-decode-peers``: decoding speed of mt and CTranslate2 side by side, on the same checkpoints.

    python scripts/bench_decode_peers.py [--ckpt-mini PATH] [--pairs 3] [--n 1000] [--n-base 128]
                                         [--threads 2] [--ct2-mkl auto|on|off] [--ct2-inter 1]
                                         [--mt-workers 1]
                                         [--precision fp32|int8]
                                         [--force] [--smoke]

The decoding twin of ``make bench-peers``. Two models, each decoded by both engines:

- ``mini``: a trained ``experiment=multi30k_en_de_paper`` checkpoint (the paper's Post-LN model with
  sinusoids, ``transformer_mini``) on Multi30k test2016 (``--n`` lines). Without ``--ckpt-mini`` the first
  run trains one (``train.max_updates=1000``, kept in ``runs/bench_decode_mini``, reused after; the run
  prints how long it took) as ``make bench`` trains ``runs/bench_small``.
- ``base``: a ``transformer_base`` with random weights (seed 0) and the mini's tokenizer, on the first
  ``--n-base`` test2016 lines, where every sentence gets exactly ``--base-pieces`` (40) pieces on both sides:
  EOS is banned before that (mt's ``min_len``, CTranslate2's ``min_decoding_length``) and the limit is that
  (mt: ``max_len_a=0, max_len_b=40``, then its forced EOS step; CTranslate2: ``max_decoding_length``), so
  the work is equal and bound by the matrix products.
- ``opus``: the OPUS-MT shape (``opus_mt_shape.py``: opus-mt-en-de's configuration, SiLU, 58,101 pieces, random
  weights) as a transformers directory, imported by ``mt-import`` on mt's side and converted by CTranslate2's
  own converter on its side (what LibreTranslate and Argos users run), on the first ``--n-base`` lines with
  ``--base-pieces`` pieces each, as ``base``. ``--no-opus`` leaves it out.

1. Converts the mini and base checkpoints with mt-export (``mt.export.export_ctranslate2``, float32) into
   ``--work-dir``; builds, imports and converts the OPUS-MT shape there.
2. Refuses to start while another process uses more than half a core (``--force`` overrides), and
   chooses CTranslate2's CPU backend: Intel MKL or its own (``--ct2-mkl``, ``choose_ct2_backend``).
3. For each of ``--pairs`` pairs and each model: mt, then CTranslate2, each in its own fresh process
   (CTranslate2's never imports torch; it checks), ``--threads`` threads (``torch.set_num_threads`` /
   ``intra_threads``, ``inter_threads=1`` unless ``--ct2-inter``, ``OMP_NUM_THREADS``). Each process decodes
   the first 8 lines once untimed, then beam ``--beam`` and greedy, timed from text in to text out
   (SentencePiece encode, batching, search, decode) with the wall clock and the CPU clock
   (``time.process_time``: all threads).
4. Prints every run (sentences/s, target tokens/s, CPU s), the medians over the pairs, how many of mt's
   mini outputs equal CTranslate2's, each pair's mt / CTranslate2 ratio and their median (``pair by pair``),
   and last ``ratio <search> <model>: X.XX`` (mt sentences/s /
   CTranslate2 float32 sentences/s, medians). Raw rows go to ``--results`` (JSON lines).

``--ct2-inter N`` lets CTranslate2 decode N batches at a time, each on ``--threads / N`` threads
(``inter_threads=N``, ``intra_threads=threads/N``): on a small model its faster way to use the cores.
``--mt-workers N`` is mt's: N decoding processes (``mt-translate --workers``), each on ``--threads / N``
threads, started and warmed up before the clock starts, each decoding every N-th sentence by length; their
CPU time is counted. The default race runs both engines one batch at a time on every thread.

``--precision int8`` races int8 against int8 instead: mt's ``--precision int8`` (int8 weights, one scale a row;
inputs quantised per call) against CTranslate2's ``compute_type="int8"``; the ratio lines then say ``int8``.

The same search on both sides: batches of at most ``--max-sentences`` (64) sentences sorted by source
length (mt's token budget is lifted so that only the sentence count cuts); beam ``--beam`` with the
penalty ``|Y|^alpha`` (|Y| counting EOS; alpha: the checkpoint's), ending a sentence once ``beam``
hypotheses are finished (CTranslate2's rule; mt's ``stopping=fairseq``); greedy. Length limit: mt allows
``floor(a * |src| + b)`` pieces per sentence, CTranslate2 one ``max_decoding_length`` per call, the largest
of those over the input (its outputs past a sentence's mt limit are counted, expected 0).

``--smoke`` (the test's): tiny sizes, 1 pair, no busy check, a small random ``base`` model (``--base-model``).
"""

from __future__ import annotations

import argparse
import json
import math
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

from bench_ct2 import read_lines
from bench_peers import git_commit, refuse_if_busy, thread_env, worker_or_main

REPO = Path(__file__).resolve().parents[1]
MINI_RUN, MINI_UPDATES = "bench_decode_mini", 1000
SEARCHES = ("beam", "greedy")
CT2_COMPUTE = {"fp32": "float32", "int8": "int8"}  # --precision: CTranslate2's matching compute type
ENGINES = ("mt", "ct2")
WARMUP_LINES = 8  # decoded once, untimed, by each worker before its timed searches
CALIBRATION = 200  # lines of the mini model timed to choose CTranslate2's backend (--ct2-mkl auto)
BIG_BUDGET = 10**9  # mt's decode.max_tokens: batches are cut by sentence count only, as CTranslate2's


# ---- the timed workers (one fresh process each) ----------------------------------------------------


def limits_of(lengths: list[int], spec: dict) -> list[int]:
    """mt's per-sentence limit in pieces (``mt.decode.common.max_output_lengths``) for source lengths."""
    return [min(max(1, math.floor(spec["max_len_a"] * n + spec["max_len_b"])), spec["max_positions"] - 1)
            for n in lengths]


def mt_worker(spec: dict) -> dict:
    import contextlib
    import dataclasses

    import torch

    from mt.allocator import keep_freed_memory
    from mt.checkpoint import load_for_inference, load_tokenizers_and_config
    from mt.decode import Translator

    def settings(search: str, decode):
        return dataclasses.replace(
            decode, strategy=search, beam_size=spec["beam"] if search == "beam" else 1, nbest=1,
            length_penalty="length", alpha=spec["alpha"], stopping="fairseq", min_len=spec["min_len"],
            max_len_a=spec["max_len_a"], max_len_b=spec["max_len_b"], max_sentences=spec["max_sentences"],
            max_tokens=BIG_BUDGET,
        )

    torch.set_num_threads(spec["threads"] // spec["mt_workers"])
    if spec["mt_workers"] > 1:  # as mt-translate --workers: this process only encodes and gathers
        tokenizers, cfg = load_tokenizers_and_config(spec["ckpt"])
        processes = mt_processes(spec, settings("beam", cfg.decode))
        base = Translator(None, tokenizers, cfg.decode, "cpu", max_positions=spec["max_positions"],
                          processes=processes)
    else:
        keep_freed_memory()  # as mt-translate
        model, tokenizers, cfg = load_for_inference(spec["ckpt"], pack=True, precision=spec["precision"])
        base = Translator(model, tokenizers, cfg.decode, "cpu", max_positions=spec["max_positions"])
    lines = read_lines(Path(spec["input"]), spec["n"])
    with contextlib.closing(base):
        return mt_searches(base, lines, settings)


def mt_processes(spec: dict, decode):
    """``--mt-workers`` started processes of ``--threads / --mt-workers`` threads, each holding the model."""
    import functools

    from mt.cli.translate import worker_translator
    from mt.decode.processes import DecodingProcesses

    build = functools.partial(worker_translator, [spec["ckpt"]], spec["precision"], decode)
    return DecodingProcesses(build, spec["mt_workers"], spec["threads"] // spec["mt_workers"]).start()


def mt_searches(base, lines: list[str], settings) -> dict:
    """Beam and greedy over ``lines`` with mt, timed (the decoding processes' CPU time counted)."""
    base.with_config(settings("beam", base.cfg)).translate(lines[:WARMUP_LINES])  # untimed: first-call set-up
    results = {}
    for search in SEARCHES:
        decoder = base.with_config(settings(search, base.cfg))
        workers_cpu = base.processes.cpu_seconds if base.processes is not None else 0.0
        wall, cpu = time.perf_counter(), time.process_time()
        out = decoder.translate_nbest(lines, scores=False)  # as CTranslate2 without return_scores
        wall, cpu = time.perf_counter() - wall, time.process_time() - cpu
        if base.processes is not None:
            cpu += base.processes.cpu_seconds - workers_cpu
        lengths = [len(t.hypotheses[0].tokens) if t.hypotheses else 0 for t in out]
        results[search] = run_figures(len(lines), wall, cpu, sum(t.tgt_tokens for t in out), lengths,
                                      [t.text for t in out])
    return results


def ct2_tokenizers(model: Path):
    """The exported model's SentencePiece processors (source, target): one joint ``spm.model``, or
    ``src.model`` and ``tgt.model`` (``mt.data.Tokenizers.save``)."""
    import sentencepiece as spm

    if (model / "spm.model").exists():
        joint = spm.SentencePieceProcessor(model_file=str(model / "spm.model"))
        return joint, joint
    return tuple(spm.SentencePieceProcessor(model_file=str(model / name)) for name in ("src.model", "tgt.model"))


def ct2_worker(spec: dict) -> dict:
    import ctranslate2

    model = Path(spec["model"])
    source_sp, target_sp = ct2_tokenizers(model)
    translator = ctranslate2.Translator(str(model), device="cpu", compute_type=CT2_COMPUTE[spec["precision"]],
                                        intra_threads=spec["threads"] // spec["ct2_inter"],  # >= 1: parse_args
                                        inter_threads=spec["ct2_inter"])
    lines = read_lines(Path(spec["input"]), spec["n"])

    def translate(texts: list[str], beam: int) -> tuple[list[list[str]], list[int]]:
        sources = [source_sp.encode(line, out_type=str)[: spec["max_positions"] - 1] for line in texts]
        limits = limits_of([len(s) for s in sources], spec)
        out = translator.translate_batch(
            sources, max_batch_size=spec["max_sentences"], batch_type="examples", beam_size=beam,
            length_penalty=spec["alpha"], max_decoding_length=max(limits), min_decoding_length=spec["min_len"],
            max_input_length=spec["max_positions"], return_end_token=True,
        )
        return [r.hypotheses[0] for r in out], limits

    translate(lines[:WARMUP_LINES], spec["beam"])  # untimed: first-call set-up
    results = {}
    for search in SEARCHES:
        wall, cpu = time.perf_counter(), time.process_time()
        hyps, limits = translate(lines, spec["beam"] if search == "beam" else 1)
        texts = [target_sp.decode([p for p in h if p != "</s>"]) for h in hyps]
        wall, cpu = time.perf_counter() - wall, time.process_time() - cpu
        lengths = [len(h) - (h[-1:] == ["</s>"]) for h in hyps]
        figures = run_figures(len(lines), wall, cpu, sum(len(h) for h in hyps), lengths, texts)
        results[search] = {**figures, "past_limit": sum(n > limit for n, limit in zip(lengths, limits, strict=True))}
    if "torch" in sys.modules:
        raise SystemExit("bench_decode_peers: the CTranslate2 worker imported torch; its timing would not be alone")
    return results


def run_figures(n: int, wall: float, cpu: float, tokens: int, lengths: list[int], texts: list[str]) -> dict:
    """One timed search: sentences/s, target tokens/s (pieces + EOS where generated), CPU s, outputs."""
    return {"sentences_per_s": n / wall, "tokens_per_s": tokens / wall, "wall_s": wall, "cpu_s": cpu,
            "pieces_min": min(lengths), "pieces_max": max(lengths), "pieces_mean": sum(lengths) / n, "texts": texts}


# ---- the parent: checkpoints, exports, alternation, report ------------------------------------------


def train_mini(data_dir: Path) -> Path:
    """The mini checkpoint (``experiment=multi30k_en_de_paper``, 1,000 updates), trained once and reused."""
    from bench import train_once  # scripts/ is on sys.path when a script runs

    overrides = [f"train.validate_every={MINI_UPDATES}", f"train.save_every={MINI_UPDATES}", "train.valid_bleu=false"]
    return train_once(MINI_RUN, MINI_UPDATES, data_dir, overrides, "the mini checkpoint")


def random_checkpoint(mini: Path, out: Path, model_name: str, overrides: list[str]) -> Path:
    """A randomly initialised ``model_name`` (seed 0) with the mini checkpoint's tokenizers, as an mt checkpoint."""
    import torch

    from mt.checkpoint import load_checkpoint, save_checkpoint, tokenizers_from_state, tokenizers_state
    from mt.config import compose, to_dict
    from mt.model import build_model

    tokenizers = tokenizers_from_state(load_checkpoint(mini))
    cfg = compose(["experiment=multi30k_en_de_paper", f"model={model_name}", *overrides])
    torch.manual_seed(0)
    model = build_model(cfg.model, tokenizers.src.padded_vocab_size, tokenizers.tgt.padded_vocab_size)
    state = {"model": model.state_dict(), "config": to_dict(cfg), "tokenizers": tokenizers_state(tokenizers)}
    save_checkpoint(out, state)
    return out


def opus_models(args: argparse.Namespace) -> tuple[Path, Path]:
    """The OPUS-MT shape: mt's import of the random directory and CTranslate2's own conversion of it."""
    from opus_mt_shape import ct2_conversion, mt_import, opus_mt_directory

    directory = opus_mt_directory(args.work_dir / "opus-mt-shape", args.data_dir, smoke=args.smoke)
    return mt_import(directory, args.work_dir / "opus.pt"), ct2_conversion(directory, args.work_dir / "ct2-opus")


def model_specs(args: argparse.Namespace, mini: Path, base: Path, opus: tuple[Path, Path] | None) -> dict[str, dict]:
    """Each model's worker settings (both engines): checkpoint, sentences, penalty, limits."""
    from mt.checkpoint import load_checkpoint
    from mt.config import to_config
    from mt.export import export_ctranslate2
    from mt.export.common import search_defaults

    specs = {}
    models = [("mini", mini, None), ("base", base, None)] + ([("opus", *opus)] if opus else [])
    for name, ckpt, converted in models:
        cfg = to_config(load_checkpoint(ckpt)["config"])
        ct2_dir = converted or args.work_dir / f"ct2-{name}"
        if converted is None:
            export_ctranslate2(ckpt, ct2_dir, None, force=True)  # every run: the directory may hold another model
        common = dict(ckpt=str(ckpt), model=str(ct2_dir), input=str(args.input), threads=args.threads,
                      ct2_inter=args.ct2_inter, mt_workers=args.mt_workers,
                      precision=args.precision,
                      beam=args.beam, max_sentences=args.max_sentences, max_positions=cfg.model.max_positions,
                      alpha=search_defaults(cfg).length_penalty)
        if name == "mini":
            specs[name] = dict(common, n=args.n, min_len=cfg.decode.min_len, max_len_a=cfg.decode.max_len_a,
                               max_len_b=cfg.decode.max_len_b)
        else:
            specs[name] = dict(common, n=args.n_base, min_len=args.base_pieces, max_len_a=0.0,
                               max_len_b=args.base_pieces)
    return specs


def run_worker(engine: str, spec: dict, args: argparse.Namespace) -> dict:
    """One fresh process of ``engine`` (this script, ``--worker``); its figures."""
    out = args.work_dir / f"{engine}.json"
    pythonpath = os.pathsep.join(filter(None, [str(REPO), os.environ.get("PYTHONPATH")]))  # this checkout's mt
    env = thread_env(args.threads) | {"PYTHONPATH": pythonpath}
    if engine == "ct2":
        env |= {"CT2_USE_MKL": "1" if args.ct2_mkl == "on" else "0"}
    cmd = [sys.executable, str(Path(__file__).resolve()), "--worker", engine, json.dumps(spec), str(out)]
    t0, cpu0 = time.monotonic(), os.times()
    subprocess.run(cmd, env=env, check=True)
    cpu1 = os.times()
    result = json.loads(out.read_text(encoding="utf-8"))
    result["process"] = {"wall_s": time.monotonic() - t0,
                         "cpu_s": cpu1.children_user + cpu1.children_system - cpu0.children_user - cpu0.children_system}
    return result


def choose_ct2_backend(args: argparse.Namespace, spec: dict) -> None:
    """``--ct2-mkl auto``: time CTranslate2 with Intel MKL and with its own backend (oneDNN) on ``CALIBRATION``
    lines of the mini model, one fresh process each, and race the faster one: on an Intel Xeon with
    AVX-512, MKL on 2 threads kept one core busy and took 3.04 s against oneDNN's 0.66 s. CTranslate2 uses
    MKL by default on Intel CPUs only."""
    if args.ct2_mkl != "auto":
        return
    small = {**spec, "n": min(spec["n"], CALIBRATION)}
    seconds = {}
    for choice in ("on", "off"):
        args.ct2_mkl = choice
        figures = run_worker("ct2", small, args)
        seconds[choice] = sum(figures[search]["wall_s"] for search in SEARCHES)
    args.ct2_mkl = min(seconds, key=seconds.__getitem__)
    print(f"CTranslate2 backend: MKL {seconds['on']:.2f} s, oneDNN {seconds['off']:.2f} s on {small['n']} lines "
          f"(beam + greedy); racing {'MKL' if args.ct2_mkl == 'on' else 'oneDNN'}", flush=True)


def run_line(pair: int, model: str, engine: str, search: str, fig: dict) -> str:
    extra = f", {fig['past_limit']} past mt's limit" if "past_limit" in fig else ""
    return (f"pair {pair} {model:4s} {engine:3s} {search:6s}: {fig['sentences_per_s']:8.1f} sentences/s "
            f"{fig['tokens_per_s']:8.0f} target tok/s  {fig['cpu_s']:6.2f} CPU s in {fig['wall_s']:6.2f} s  "
            f"(pieces {fig['pieces_min']}-{fig['pieces_max']}, mean {fig['pieces_mean']:.1f}{extra})")


def ratio_lines(medians: dict[tuple[str, str, str], float], beam: int, models: list[str],
                precision: str = "fp32") -> list[str]:
    """``ratio beam<K> <model>: X.XX`` and ``ratio greedy <model>: X.XX``: mt / CTranslate2 sentences/s
    (``ratio int8 beam<K> <model>`` ... for ``--precision int8``)."""
    lines = []
    for model in models:
        for search in SEARCHES:
            label = f"beam{beam}" if search == "beam" else "greedy"
            label = label if precision == "fp32" else f"{precision} {label}"
            lines.append(f"ratio {label} {model}: {medians[model, 'mt', search] / medians[model, 'ct2', search]:.2f}")
    return lines


def pair_ratio_lines(runs: list[dict], models: list[str]) -> list[str]:
    """Each pair's mt / CTranslate2 sentences/s and their median, per model and search: the two runs of a pair
    are next to each other in time, so on a machine whose speed drifts these compare like with like (the ratio
    of the two medians may set a run of one state against a run of another)."""
    lines = []
    for model in models:
        for search in SEARCHES:
            speed = {(r["pair"], r["engine"]): r["figures"][search]["sentences_per_s"] for r in runs
                     if r["model"] == model}
            pairs = sorted({pair for pair, _ in speed})
            ratios = [speed[pair, "mt"] / speed[pair, "ct2"] for pair in pairs]
            lines.append(f"pair by pair {search} {model}: {' '.join(f'{r:.2f}' for r in ratios)} "
                         f"(median {statistics.median(ratios):.2f})")
    return lines


def same_outputs(runs: list[dict], search: str) -> tuple[int, int]:
    """How many of mt's outputs equal CTranslate2's (the last pair's runs; the outputs do not vary)."""
    mt = next(r for r in reversed(runs) if r["engine"] == "mt")["figures"][search]["texts"]
    ct2 = next(r for r in reversed(runs) if r["engine"] == "ct2")["figures"][search]["texts"]
    return sum(a == b for a, b in zip(mt, ct2, strict=True)), len(mt)


def parse_args() -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--ckpt-mini", type=Path,
                   help=f"a trained multi30k_en_de_paper checkpoint (default: train runs/{MINI_RUN} once)")
    p.add_argument("--data-dir", type=Path, default=REPO.parent / "shared" / "data" / "multi30k")
    p.add_argument("--input", type=Path, help="source lines (default: <data-dir>/test_2016_flickr.en.gz)")
    p.add_argument("--pairs", type=int, default=3, help="mt/CTranslate2 pairs per model (alternated)")
    p.add_argument("--n", type=int, default=1000, help="sentences of the mini model (the first N of --input)")
    p.add_argument("--n-base", type=int, default=128, help="sentences of the base model")
    p.add_argument("--base-pieces", type=int, default=40, help="pieces every base-model output has")
    p.add_argument("--base-model", default="transformer_base", help="the random model's config (conf/model)")
    p.add_argument("--base-overrides", nargs="*", default=[], help="overrides of the random model's config")
    p.add_argument("--no-opus", action="store_true", help="leave out the OPUS-MT shape (opus_mt_shape.py)")
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--beam", type=int, default=4)
    p.add_argument("--max-sentences", type=int, default=64)
    p.add_argument("--work-dir", type=Path, default=REPO / "runs" / "bench_decode_peers",
                   help="the random checkpoint, the CTranslate2 models, the workers' results")
    p.add_argument("--results", type=Path, default=REPO / "bench" / "decode-peers-results.jsonl")
    p.add_argument("--ct2-mkl", choices=("auto", "on", "off"), default="auto",
                   help="CTranslate2's Intel MKL backend (CT2_USE_MKL); auto: the faster on this machine")
    p.add_argument("--ct2-inter", type=int, default=1,
                   help="batches CTranslate2 decodes at a time, each on threads/N threads (default: %(default)s)")
    p.add_argument("--mt-workers", type=int, default=1,
                   help="mt's decoding processes (mt-translate --workers), each on threads/N threads "
                        "(default: %(default)s)")
    p.add_argument("--precision", choices=tuple(CT2_COMPUTE), default="fp32",
                   help="mt's --precision, raced against CTranslate2's matching compute type (default: %(default)s)")
    p.add_argument("--force", action="store_true", help="start even if other processes are busy")
    p.add_argument("--smoke", action="store_true", help="tiny sizes, 1 pair, no busy check (the test's)")
    args = p.parse_args()
    if args.smoke:
        args.pairs, args.n, args.n_base, args.base_pieces, args.force = 1, min(args.n, 8), min(args.n_base, 4), 5, True
        if args.base_model == "transformer_base":
            args.base_model = "transformer_tiny"
            args.base_overrides = ["model.d_model=32", "model.d_ff=64", "model.encoder_layers=1",
                                   "model.decoder_layers=1", *args.base_overrides]
    if args.pairs < 1 or args.n < 1 or args.n_base < 1 or args.base_pieces < 1:
        p.error("--pairs, --n, --n-base and --base-pieces must be at least 1")
    for flag, value in (("--ct2-inter", args.ct2_inter), ("--mt-workers", args.mt_workers)):
        if not 1 <= value <= args.threads:
            p.error(f"{flag} must be between 1 and --threads ({args.threads}), got {value}")
    args.input = args.input or args.data_dir / "test_2016_flickr.en.gz"
    return args


def main() -> None:
    args = parse_args()
    refuse_if_busy(args.force)
    args.work_dir.mkdir(parents=True, exist_ok=True)
    mini = args.ckpt_mini or train_mini(args.data_dir)
    base = random_checkpoint(mini, args.work_dir / "base.pt", args.base_model, args.base_overrides)
    specs = model_specs(args, mini, base, None if args.no_opus else opus_models(args))
    choose_ct2_backend(args, specs["mini"])
    session = {"time": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()), "mt_commit": git_commit(),
               "threads": args.threads, "beam": args.beam, "max_sentences": args.max_sentences,
               "ct2_mkl": args.ct2_mkl, "ct2_inter": args.ct2_inter, "mt_workers": args.mt_workers,
               "precision": args.precision}
    inter = f", {args.ct2_inter} batches at a time" if args.ct2_inter > 1 else ""
    workers = f" (mt {args.mt_workers} decoding processes)" if args.mt_workers > 1 else ""
    print(f"{args.pairs} pair(s), {args.threads} threads{workers}, {args.precision} (CTranslate2 "
          f"{CT2_COMPUTE[args.precision]}{inter}), beam {args.beam} (|Y|^alpha, fairseq's stop) and greedy, "
          f"batches of <= {args.max_sentences} sentences; mini: {specs['mini']['n']} lines, alpha "
          f"{specs['mini']['alpha']}; base ({args.base_model}, random): {specs['base']['n']} lines x "
          f"{args.base_pieces} pieces" + ("" if args.no_opus else "; opus (the OPUS-MT shape, random): the same"),
          flush=True)
    runs: list[dict] = []
    args.results.parent.mkdir(parents=True, exist_ok=True)
    with args.results.open("a") as results:
        for pair in range(1, args.pairs + 1):
            for model, spec in specs.items():
                for engine in ENGINES:
                    figures = run_worker(engine, spec, args)
                    runs.append({"pair": pair, "model": model, "engine": engine, "figures": figures})
                    row = {**session, "pair": pair, "model": model, "engine": engine,
                           **{s: {k: v for k, v in figures[s].items() if k != "texts"} for s in SEARCHES},
                           "process": figures["process"]}
                    results.write(json.dumps(row) + "\n")
                    results.flush()
                    for search in SEARCHES:
                        print(run_line(pair, model, engine, search, figures[search]), flush=True)
                    process = figures["process"]
                    print(f"pair {pair} {model:4s} {engine:3s} process: {process['wall_s']:.1f} s wall, "
                          f"{process['cpu_s']:.1f} s CPU", flush=True)
    medians = {}
    print(f"\nmedians over {args.pairs} pair(s):")
    for model in specs:
        for engine in ENGINES:
            for search in SEARCHES:
                mine = [r["figures"][search] for r in runs if r["model"] == model and r["engine"] == engine]
                medians[model, engine, search] = statistics.median(f["sentences_per_s"] for f in mine)
                cpu = statistics.median(f["cpu_s"] for f in mine)
                print(f"  {model:4s} {engine:3s} {search:6s}: {medians[model, engine, search]:8.1f} sentences/s, "
                      f"{cpu:6.2f} CPU s")
    mini_runs = [r for r in runs if r["model"] == "mini"]
    for search in SEARCHES:
        same, total = same_outputs(mini_runs, search)
        print(f"mini {search}: {same}/{total} of mt's outputs equal CTranslate2's")
    print("\n".join(pair_ratio_lines(runs, list(specs))))
    print()
    print("\n".join(ratio_lines(medians, args.beam, list(specs), args.precision)))


if __name__ == "__main__":
    worker_or_main({"mt": mt_worker, "ct2": ct2_worker}, main)
