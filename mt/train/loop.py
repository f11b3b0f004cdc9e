"""The main job: train, then average, test, plot and tell the user where everything is."""

from __future__ import annotations

import dataclasses
import json
import logging
from dataclasses import dataclass, field
from pathlib import Path

import torch

from mt import checkpoint as ckpt
from mt.config import Config
from mt.eval.scoring import translate_and_score
from mt.train.distributed import shutdown
from mt.train.trainer import Trainer

logger = logging.getLogger(__name__)


@dataclass
class RunSummary:
    run_dir: Path
    reason: str
    step: int
    best_checkpoint: Path | None
    test: dict = field(default_factory=dict)
    plots: list[Path] = field(default_factory=list)
    samples: list[tuple[str, str, str]] = field(default_factory=list)


def _valid_bleu(trainer: Trainer, checkpoint: Path) -> float:
    """Greedy sacreBLEU of ``checkpoint`` on the valid split (to choose between best and averaged)."""
    model, tokenizers, cfg = ckpt.load_for_inference(checkpoint, trainer.device)
    split = trainer.data.splits["valid"]
    greedy = dataclasses.replace(cfg.decode, strategy="greedy", beam_size=1, nbest=1)
    _, scores = translate_and_score(model, tokenizers, greedy, trainer.device, cfg.model.max_positions,
                                    list(split.src_text), list(split.tgt_text))
    return float(scores["bleu"])


def _average_last(trainer: Trainer) -> Path | None:
    n = trainer.cfg.train.average_last
    found = [p for _, p in ckpt.list_checkpoints(trainer.ckpt_dir)][-n:]
    if n <= 0 or len(found) < 2:
        return None
    path = trainer.ckpt_dir / "averaged.pt"
    ckpt.save_checkpoint(path, ckpt.average_checkpoints(found))
    print(f"Averaged {len(found)} checkpoints -> {path}", flush=True)
    return path


def _test(trainer: Trainer, checkpoint: Path) -> tuple[dict, list[tuple[str, str, str]]]:
    """Translate the test split with ``checkpoint`` (the run's decode settings) and score it."""
    from mt.data import prepare_data

    model, tokenizers, cfg = ckpt.load_for_inference(checkpoint, trainer.device)
    split = trainer.data.splits.get("test") or prepare_data(cfg.data, splits=("test",)).splits["test"]
    sources, refs = list(split.src_text), list(split.tgt_text)
    hyps, scores = translate_and_score(model, tokenizers, cfg.decode, trainer.device, cfg.model.max_positions,
                                       sources, refs)
    result = {
        "checkpoint": str(checkpoint),
        **scores,
        "sentences": len(sources),
        "decode": {"strategy": cfg.decode.strategy, "beam_size": cfg.decode.beam_size,
                   "length_penalty": cfg.decode.length_penalty, "alpha": cfg.decode.alpha},
    }
    k = trainer.cfg.train.samples
    return result, list(zip(sources[:k], refs[:k], hyps[:k], strict=True))


def _plots(run_dir: Path) -> list[Path]:
    try:
        from mt.eval.plots import plot_learning_curves

        return [Path(p) for p in plot_learning_curves(run_dir)]
    except Exception as e:  # noqa: BLE001 - plotting must never lose a finished run
        logger.warning("could not draw learning curves: %s", e)
        return []


def _print_summary(s: RunSummary, trainer: Trainer) -> None:
    st = trainer.state
    lines = [
        "",
        f"Finished ({s.reason}) after {s.step} updates, {st.train_seconds / 60:.1f} min of training.",
        f"  run directory : {s.run_dir}",
        f"  checkpoints   : {trainer.ckpt_dir} (best.pt: valid {st.best_metric_name or 'score'} "
        f"{st.best_metric if st.best_metric is None else round(st.best_metric, 3)} at update {st.best_step})",
        f"  metrics       : {s.run_dir / 'metrics.jsonl'}"
        + (f"; TensorBoard: tensorboard --logdir {s.run_dir / 'tb'}" if trainer.cfg.train.tensorboard else ""),
    ]
    if s.plots:
        lines.append("  plots         : " + ", ".join(str(p) for p in s.plots))
    if st.skipped_nonfinite or st.skipped_oom:
        lines.append(f"  skipped       : {st.skipped_nonfinite} non-finite, {st.skipped_oom} out-of-memory updates")
    if s.test:
        lines.append(f"  test BLEU     : {s.test['bleu']:.2f}  chrF {s.test['chrf']:.2f}  ({s.test['bleu_signature']})")
    if s.samples:
        lines.append("Sample translations (test):")
        for src, ref, hyp in s.samples:
            lines += [f"  SRC {src}", f"  REF {ref}", f"  HYP {hyp}", ""]
    default = Path("runs") / trainer.cfg.name / "checkpoints" / "best.pt"
    how = f"EXP={trainer.cfg.name}" if s.best_checkpoint == default else f"CKPT={s.best_checkpoint}"
    lines.append(f"Translate with it: echo 'some text' | make translate {how}")
    print("\n".join(lines), flush=True)


def train(cfg: Config) -> RunSummary:
    """Run (or resume) training as configured and finish the run; returns what was produced."""
    trainer = Trainer(cfg)
    try:
        reason = trainer.run()
        summary = RunSummary(trainer.run_dir, reason, trainer.state.step, None)
        if not trainer.dist.is_main or reason.startswith("signal"):
            return summary
        best = trainer.ckpt_dir / "best.pt"
        summary.best_checkpoint = best
        averaged = _average_last(trainer)
        if averaged is not None and best.exists():
            bleus = {path: _valid_bleu(trainer, path) for path in (best, averaged)}
            print("valid BLEU (greedy): " + ", ".join(f"{p.name} {b:.2f}" for p, b in bleus.items()), flush=True)
            summary.best_checkpoint = max(bleus, key=bleus.get)
        if cfg.train.test_at_end and summary.best_checkpoint.exists():
            with torch.random.fork_rng():
                summary.test, summary.samples = _test(trainer, summary.best_checkpoint)
            (trainer.run_dir / "test_results.json").write_text(json.dumps(summary.test, indent=2) + "\n")
            _append_test_row(trainer, summary.test)
        summary.plots = _plots(trainer.run_dir)
        _print_summary(summary, trainer)
        return summary
    finally:
        shutdown(trainer.dist)


def _append_test_row(trainer: Trainer, test: dict) -> None:
    with (trainer.run_dir / "metrics.jsonl").open("a", encoding="utf-8") as f:
        row = {"split": "test", "step": trainer.state.step, "bleu": test["bleu"], "chrf": test["chrf"]}
        f.write(json.dumps(row) + "\n")
