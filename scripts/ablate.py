"""Equal-budget ablation of the modern Transformer options on Multi30k En->De (``make ablate``).

    python scripts/ablate.py                      # 9 rows x 30 min of training, in runs/ablation
    python scripts/ablate.py --minutes 10 --rows postln,preln
    python scripts/ablate.py --report-only        # table and PNG from the rows already finished

Every row trains ``experiment=multi30k_en_de_paper`` (transformer_mini, joint 8k BPE, 4096-token batches)
with the same data, seed, batch size, schedule and wall-clock budget (``train.max_time_minutes``,
validation included), in its own ``python -m mt.train`` process, one at a time. The rows:

    postln    the paper: Post-LN, LayerNorm, ReLU, sinusoidal positions, 4 K/V heads
    preln     Pre-LN
    rms       Pre-LN + RMSNorm                      (the base of the next five rows)
    swiglu    Pre-LN + RMSNorm + SwiGLU
    rope      Pre-LN + RMSNorm + RoPE
    qknorm    Pre-LN + RMSNorm + QK-norm
    gqa       Pre-LN + RMSNorm + kv_heads = heads/2
    mqa       Pre-LN + RMSNorm + kv_heads = 1
    modern    all together: Pre-LN, RMSNorm, SwiGLU, RoPE, QK-norm, kv_heads = heads/2

After each run the final weights (``last.pt``) are scored here: valid greedy BLEU, test2016 beam
sacreBLEU (beam 4, GNMT alpha 0.6, ``topk_eos``, pinned), decoding sentences/s of that test decode (2 threads),
parameters and KV-cache bytes per generated token (fp32, self-attention, all decoder layers). A row's
``result.json`` is written last, so an interrupted ablation resumes at the first unfinished row
(a half-trained row resumes from its checkpoint). The table goes to ``ablation.md`` and the
valid-perplexity curves to ``valid_ppl.png`` in the output directory. Besides each row's final
figures the table gives its valid perplexity at the last validation step every row reached: a
per-update comparison that the machine's drift in speed cannot blur (tokens/s of one run per row
can: read speed differences under ~20% as noise on a shared or drifting machine).
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
from pathlib import Path

PRE, RMS = "model.pre_ln=true", "model.norm=rmsnorm"
ROWS: dict[str, tuple[str, list[str]]] = {
    "postln": ("Post-LN (paper)", []),
    "preln": ("Pre-LN", [PRE]),
    "rms": ("Pre-LN + RMSNorm", [PRE, RMS]),
    "swiglu": ("+ SwiGLU", [PRE, RMS, "model.activation=swiglu"]),
    "rope": ("+ RoPE", [PRE, RMS, "model.positions=rope"]),
    "qknorm": ("+ QK-norm", [PRE, RMS, "model.qk_norm=true"]),
    "gqa": ("+ GQA (2 K/V heads)", [PRE, RMS, "model.kv_heads=2"]),
    "mqa": ("+ MQA (1 K/V head)", [PRE, RMS, "model.kv_heads=1"]),
    "modern": ("all modern options", [PRE, RMS, "model.activation=swiglu", "model.positions=rope",
                                      "model.qk_norm=true", "model.kv_heads=2"]),
}


def train_overrides(args: argparse.Namespace, run_dir: Path, options: list[str]) -> list[str]:
    """The recipe every row shares, then the row's model options."""
    return [
        # Every row starts from the paper's model and decoding (the preset has moved on to Pre-LN + RoPE).
        "experiment=multi30k_en_de_paper", f"data.dir={args.data_dir}", f"train.run_dir={run_dir}",
        f"train.max_time_minutes={args.minutes}", "train.max_updates=1000000", f"train.seed={args.seed}",
        f"optim.warmup_updates={args.warmup}", f"train.validate_every={args.validate_every}",
        f"train.save_every={args.validate_every}", "train.valid_bleu=false", "train.best_metric=loss",
        "train.keep_last=1", "train.average_last=0", "train.test_at_end=false", "train.progress=false",
        "train.tensorboard=false", "train.threads=2", *options,
    ]


def train_row(args: argparse.Namespace, run_dir: Path, options: list[str]) -> None:
    """Train one row in its own process (resuming if it was interrupted)."""
    cmd = [sys.executable, "-m", "mt.train", *train_overrides(args, run_dir, options)]
    print("$ " + " ".join(cmd), flush=True)
    with open(run_dir.parent / f"{run_dir.name}.log", "a", encoding="utf-8") as log:
        code = subprocess.run(cmd, stdout=log, stderr=subprocess.STDOUT, check=False).returncode
    if code != 0:
        sys.exit(f"ablate: error: training row {run_dir.name} failed (exit {code}); see {run_dir}.log")


def read_metrics(run_dir: Path) -> list[dict]:
    from mt.eval.plots import read_metrics as read

    return read(run_dir / "metrics.jsonl")


def valid_curve(rows: list[dict]) -> dict[int, float]:
    """Valid perplexity by update step, from metrics.jsonl rows."""
    return {r["step"]: r["ppl"] for r in rows if r.get("split") == "valid"}


def train_throughput(rows: list[dict]) -> tuple[int, float]:
    """(updates reached, target tokens/s over the logged training intervals) from metrics.jsonl rows."""
    train = [r for r in rows if r.get("split") == "train" and r.get("tokens_per_s")]
    if not train:
        raise SystemExit("ablate: error: no training interval was logged (train.log_every); give the rows more time")
    tokens = sum(r["ntokens"] for r in train)
    seconds = sum(r["ntokens"] / r["tokens_per_s"] for r in train)
    return max(r["step"] for r in rows), tokens / seconds


def score_row(run_dir: Path, label: str) -> dict:
    """Score ``last.pt``: valid greedy BLEU, test beam BLEU/chrF, decoding speed, size, KV cache."""
    import torch

    from mt import checkpoint as ckpt
    from mt.data import prepare_data
    from mt.eval.scoring import translate_and_score
    from mt.model.summary import count_parameters, kv_cache_values_per_token
    from mt.train.validate import valid_bleu, validation_decode_config

    torch.set_num_threads(2)
    cpu = torch.device("cpu")
    model, tokenizers, cfg = ckpt.load_for_inference(run_dir / "checkpoints" / "last.pt", cpu)
    m = cfg.model
    splits = prepare_data(cfg.data, splits=("valid", "test")).splits
    greedy = validation_decode_config(cfg.decode, beam_size=1)
    valid_greedy = valid_bleu(model, tokenizers, splits["valid"], greedy, cpu, max_positions=m.max_positions)["bleu"]
    test = splits["test"]
    start = time.perf_counter()
    _, scores = translate_and_score(model, tokenizers, cfg.decode, cpu, m.max_positions,
                                    list(test.src_text), list(test.tgt_text))  # fmt: skip
    seconds = time.perf_counter() - start
    rows = read_metrics(run_dir)
    updates, tokens_per_s = train_throughput(rows)
    return {
        "row": run_dir.name, "label": label, "parameters": count_parameters(model)["total"],
        "train_tokens_per_s": round(tokens_per_s), "updates": updates,
        "valid_ppl": list(valid_curve(rows).values())[-1], "valid_bleu_greedy": float(valid_greedy),
        "test_bleu": scores["bleu"], "test_chrf": scores["chrf"], "bleu_signature": scores["bleu_signature"],
        "decode_sentences_per_s": len(test) / seconds,
        "kv_bytes_per_token": 4 * kv_cache_values_per_token(m.decoder_layers, m.d_model, m.heads, m.kv_heads),
    }


def valid_ppl_at_common_step(curves: list[dict[int, float]]) -> tuple[int, list[float]]:
    """The last validation step that every row reached, and each row's valid perplexity there
    (a per-update comparison, which the machine's drift in speed cannot blur)."""
    step = max(set.intersection(*(set(c) for c in curves)))
    return step, [c[step] for c in curves]


def table(results: list[dict], common_step: int, ppl_at_step: list[float]) -> str:
    lines = [
        f"| row | parameters | train tok/s | updates | valid ppl | valid ppl @ {common_step} upd. "
        "| valid BLEU (greedy) | test2016 BLEU (beam 4) | chrF | decode sent/s | KV bytes/token |",
        "| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |",
    ]
    for r, ppl in zip(results, ppl_at_step, strict=True):
        lines.append(
            f"| {r['label']} | {r['parameters']:,} | {r['train_tokens_per_s']:,} | {r['updates']:,} "
            f"| {r['valid_ppl']:.2f} | {ppl:.2f} | {r['valid_bleu_greedy']:.2f} | {r['test_bleu']:.2f} "
            f"| {r['test_chrf']:.1f} | {r['decode_sentences_per_s']:.0f} | {r['kv_bytes_per_token']:,} |"
        )
    return "\n".join(lines)


def plot(results: list[dict], curves: list[dict[int, float]], out: Path) -> Path:
    from mt.eval.plots import line_plot

    lines = [(r["label"], list(c), list(c.values())) for r, c in zip(results, curves, strict=True)]
    return line_plot(out / "valid_ppl.png", "Multi30k valid perplexity, equal wall-clock budget",
                     "valid perplexity", lines, log_y=True)


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--out", type=Path, default=Path("runs/ablation"))
    p.add_argument("--rows", default=",".join(ROWS), help=f"comma-separated, of: {','.join(ROWS)}")
    p.add_argument("--minutes", type=float, default=30.0, help="training budget per row, validation included")
    p.add_argument("--warmup", type=int, default=2000, help="warm-up updates, the same for every row")
    p.add_argument("--validate-every", type=int, default=200)
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--data-dir", default=str(Path(__file__).resolve().parents[2] / "shared/data/multi30k"))
    p.add_argument("--report-only", action="store_true", help="only the table and PNG of finished rows")
    args = p.parse_args(argv)
    names = [n.strip() for n in args.rows.split(",") if n.strip()]
    unknown = [n for n in names if n not in ROWS]
    if unknown:
        p.error(f"unknown row(s) {', '.join(unknown)}; expected some of {', '.join(ROWS)}")
    args.out.mkdir(parents=True, exist_ok=True)
    results = []
    for name in names:
        label, options = ROWS[name]
        run_dir = args.out / name
        done = run_dir / "result.json"
        if not done.exists():
            if args.report_only:
                continue
            train_row(args, run_dir, options)
            done.write_text(json.dumps(score_row(run_dir, label), indent=2) + "\n")
        results.append(json.loads(done.read_text()))
        print(json.dumps(results[-1]), flush=True)
    if not results:
        sys.exit("ablate: error: no finished rows to report")
    curves = [valid_curve(read_metrics(args.out / r["row"])) for r in results]
    md = table(results, *valid_ppl_at_common_step(curves))
    (args.out / "ablation.md").write_text(md + "\n")
    print(f"\n{md}\n\nvalid perplexity curves: {plot(results, curves, args.out)}")


if __name__ == "__main__":
    main()
