"""What a finished run produced, and the summary printed for the user at its end."""

from __future__ import annotations

import json
import logging
from dataclasses import dataclass, field
from pathlib import Path

from mt.config import Config
from mt.runs import best_checkpoint, experiment_dir
from mt.train.state import TrainState

logger = logging.getLogger(__name__)


@dataclass
class RunSummary:
    run_dir: Path
    reason: str  # why training stopped (max_updates, early stopping, signal (SIGTERM), ...)
    step: int
    best_checkpoint: Path | None  # best.pt or averaged.pt, whichever scored higher on valid
    test: dict = field(default_factory=dict)
    plots: list[Path] = field(default_factory=list)
    samples: list[tuple[str, str, str]] = field(default_factory=list)  # (source, reference, hypothesis)


def draw_plots(run_dir: Path) -> list[Path]:
    """Learning curves from ``metrics.jsonl``; a failure is a warning, never a lost run."""
    try:
        from mt.eval.plots import plot_learning_curves

        return [Path(p) for p in plot_learning_curves(run_dir)]
    except Exception as e:  # noqa: BLE001 - plotting must never lose a finished run
        logger.warning("could not draw learning curves: %s", e)
        return []


def append_test_row(run_dir: Path, step: int, test: dict) -> None:
    """The test scores as the last row of ``metrics.jsonl``."""
    with (run_dir / "metrics.jsonl").open("a", encoding="utf-8") as f:
        row = {"split": "test", "step": step, "bleu": test["bleu"], "chrf": test["chrf"]}
        for pair in test.get("pairs", {}):  # several language pairs: each pair's scores too
            row.update({f"bleu_{pair}": test["pairs"][pair]["bleu"], f"chrf_{pair}": test["pairs"][pair]["chrf"]})
        f.write(json.dumps(row) + "\n")


def print_summary(s: RunSummary, state: TrainState, ckpt_dir: Path, cfg: Config) -> None:
    """Where everything is, the best score, skipped updates, test scores, samples and the translate command."""
    best = state.best_metric if state.best_metric is None else round(state.best_metric, 3)
    lines = [
        "",
        f"Finished ({s.reason}) after {s.step} updates, {state.train_seconds / 60:.1f} min of training.",
        f"  run directory : {s.run_dir}",
        f"  checkpoints   : {ckpt_dir} (best.pt: valid {state.best_metric_name or 'score'} "
        f"{best} at update {state.best_step})",
        f"  metrics       : {s.run_dir / 'metrics.jsonl'}"
        + (f"; TensorBoard: tensorboard --logdir {s.run_dir / 'tb'}" if cfg.train.tensorboard else ""),
    ]
    if s.plots:
        lines.append("  plots         : " + ", ".join(str(p) for p in s.plots))
    if state.skipped_nonfinite or state.skipped_oom:
        skipped = f"{state.skipped_nonfinite} non-finite, {state.skipped_oom} out-of-memory updates"
        lines.append(f"  skipped       : {skipped}")
    if s.test:
        mean = " (mean over pairs)" if "pairs" in s.test else ""
        lines.append(
            f"  test BLEU     : {s.test['bleu']:.2f}  chrF {s.test['chrf']:.2f}{mean}  ({s.test['bleu_signature']})"
        )
        for pair, scores in s.test.get("pairs", {}).items():
            lines.append(f"    {pair:<12}: BLEU {scores['bleu']:.2f}  chrF {scores['chrf']:.2f}  "
                         f"({scores['sentences']} sentences)")
    if s.samples:
        lines.append("Sample translations (test):")
        for src, ref, hyp in s.samples:
            lines += [f"  SRC {src}", f"  REF {ref}", f"  HYP {hyp}", ""]
    by_name = s.best_checkpoint == best_checkpoint(experiment_dir(cfg.name))  # what --exp finds (mt.runs)
    how = f"EXP={cfg.name}" if by_name else f"CKPT={s.best_checkpoint}"
    lines.append(f"Translate with it: echo 'some text' | make translate {how}")
    print("\n".join(lines), flush=True)
