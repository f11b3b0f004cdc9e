"""The main job: train, then average, choose, test, plot and tell the user where everything is.

``train(cfg)`` is what ``mt-train`` runs. The end of a run works on files and splits only (the
checkpoints directory, the valid and test splits, a device), never on the trainer.
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Sequence
from pathlib import Path

import torch

from mt import __version__
from mt import checkpoint as ckpt
from mt.config import Config
from mt.data import TokenizedSplit, prepare_data
from mt.data.languages import data_pairs, is_multilingual
from mt.device import resolve_device
from mt.eval.scoring import mean_over_pairs, translate_and_score
from mt.train.distill import distill_training_set, distilled_member
from mt.train.distributed import shutdown
from mt.train.members import (
    ensemble_summary,
    fewer_members_note,
    later_member_changes,
    member_configs,
    members_that_fit,
)
from mt.train.state import TrainState
from mt.train.summary import RunSummary, append_test_row, draw_plots, print_summary
from mt.train.trainer import Trainer
from mt.train.validate import valid_bleu, validation_decode_config

__all__ = ["RunSummary", "average_last", "checkpoint_valid_bleu", "finish_run", "score_on_test", "train"]


def train(cfg: Config) -> RunSummary:
    """Run (or resume) training as configured and finish the run; returns what was produced. With
    ``train.members`` > 1: that many runs one after another, tested as one ensemble (``mt.train.members``;
    fewer, down to one model, when the budget is short for them: ``train.member_min_minutes``)."""
    count = members_that_fit(cfg.train)
    if count < cfg.train.members:
        print(fewer_members_note(cfg.train, count), flush=True)
    if count > 1:
        return train_members(cfg)
    cfg = dataclasses.replace(cfg, train=dataclasses.replace(cfg.train, members=1))
    trainer = Trainer(cfg)
    try:
        reason = trainer.run()
        summary = RunSummary(trainer.run_dir, reason, trainer.state.step, None)
        if trainer.dist.is_main and not reason.startswith("signal"):
            finish_run(summary, trainer.cfg, trainer.state, trainer.ckpt_dir, trainer.parts.data.splits,
                       trainer.device)
        return summary
    finally:
        shutdown(trainer.dist)


def finish_run(
    summary: RunSummary, cfg: Config, state: TrainState, ckpt_dir: Path, splits: dict[str, TokenizedSplit],
    device: torch.device,
) -> None:
    """Average the last checkpoints, keep whichever of best/averaged scores higher, test it, print it all."""
    best = ckpt_dir / "best.pt"
    summary.best_checkpoint = best
    averaged = average_last(ckpt_dir, cfg.train.average_last)
    if averaged is not None and best.exists():
        bleus = {path: checkpoint_valid_bleu(path, splits["valid"], device) for path in (best, averaged)}
        print("valid BLEU (greedy): " + ", ".join(f"{p.name} {b:.2f}" for p, b in bleus.items()), flush=True)
        summary.best_checkpoint = max(bleus, key=bleus.get)
    if cfg.train.test_at_end and summary.best_checkpoint.exists():
        with torch.random.fork_rng():
            summary.test, summary.samples = score_on_test(
                summary.best_checkpoint, splits.get("test"), device, samples=cfg.train.samples
            )
        results = {**summary.test, "mt_version": __version__}
        (summary.run_dir / "test_results.json").write_text(json.dumps(results, indent=2) + "\n")
        append_test_row(summary.run_dir, state.step, summary.test)
    summary.plots = draw_plots(summary.run_dir)
    print_summary(summary, state, ckpt_dir, cfg)


def train_members(cfg: Config) -> RunSummary:
    """The members of ``train.members`` one after another (stopping at a signal), then their test together."""
    members: list[RunSummary] = []
    configs = member_configs(cfg)
    device = resolve_device(cfg.train.device, key="train.device")
    for k in range(len(configs)):
        if k == 1 and cfg.train.distill:  # the first member's translations join the later members' data
            distilled = distill_training_set(members[0].best_checkpoint, cfg, Path(cfg.train.run_dir) / "distilled",
                                             device)
            configs[1:] = [distilled_member(c, distilled, pays_for_it=j == 0) for j, c in enumerate(configs[1:])]
        member = configs[k]
        tc = member.train
        budget = f", {tc.max_time_minutes:.4g} min" if tc.max_time_minutes > 0 else ""
        changes = later_member_changes(cfg.train) if k else ""
        print(f"\nmember {k + 1} of {len(configs)}: seed {tc.seed}{budget}{changes}, {tc.run_dir}", flush=True)
        members.append(train(member))
        if members[-1].reason.startswith("signal") or members[-1].best_checkpoint is None:
            return members[-1]
    test, samples = {}, []
    if cfg.train.test_at_end:
        chosen = [Path(m.best_checkpoint) for m in members]  # every member chose one (else returned above)
        with torch.random.fork_rng():
            test, samples = score_on_test(chosen, None, device, samples=cfg.train.samples)
    return ensemble_summary(cfg, members, test, samples)


def average_last(ckpt_dir: Path, n: int) -> Path | None:
    """Average the newest ``n`` numbered checkpoints into ``averaged.pt`` (None with fewer than 2)."""
    found = [p for _, p in ckpt.list_checkpoints(ckpt_dir)][-n:]
    if n <= 0 or len(found) < 2:
        return None
    path = ckpt_dir / "averaged.pt"
    ckpt.save_checkpoint(path, ckpt.average_checkpoints(found))
    print(f"Averaged {len(found)} checkpoints -> {path}", flush=True)
    return path


def checkpoint_valid_bleu(checkpoint: Path, split: TokenizedSplit, device: torch.device) -> float:
    """Greedy sacreBLEU of ``checkpoint`` on ``split`` (to choose between best and averaged); the mean over
    the pairs for several language pairs."""
    model, tokenizers, cfg = ckpt.load_for_inference(checkpoint, device, pack=True)
    greedy = validation_decode_config(cfg.decode, beam_size=1)
    multilingual = is_multilingual(cfg.data)
    bleus = [
        float(valid_bleu(model, tokenizers, split.pair_split(i) if len(data_pairs(cfg.data)) > 1 else split, greedy,
                         device, max_positions=cfg.model.max_positions,
                         target_lang=pair.tgt if multilingual else None)["bleu"])
        for i, pair in enumerate(data_pairs(cfg.data))
    ]
    return sum(bleus) / len(bleus)


def score_on_test(
    checkpoint: Path | Sequence[Path], split: TokenizedSplit | None, device: torch.device, *, samples: int
) -> tuple[dict, list[tuple[str, str, str]]]:
    """Translate the test split with ``checkpoint`` (its decode settings; several: one ensemble, the first's
    settings, all of them listed as ``members``) and score it; ``samples`` examples.

    Without ``split`` the test split is prepared from the checkpoint's data settings. With several language
    pairs every pair is scored on its own: ``bleu`` / ``chrf`` are the means over the pairs, ``bleu_en-fr``
    ... each pair's, ``pairs`` maps each pair to its ``bleu``, ``chrf`` and ``sentences``; the samples are
    taken from every pair in turn.
    """
    paths = [checkpoint] if isinstance(checkpoint, Path) else list(checkpoint)
    model, tokenizers, cfg = ckpt.load_models_for_inference(paths, device, pack=True)
    split = split if split is not None else prepare_data(cfg.data, splits=("test",)).splits["test"]
    pairs, multilingual = data_pairs(cfg.data), is_multilingual(cfg.data)
    per_pair, examples = {}, []
    for index, pair in enumerate(pairs):
        part = split.pair_split(index) if len(pairs) > 1 else split
        sources, refs = list(part.src_text), list(part.tgt_text)
        hyps, scores = translate_and_score(model, tokenizers, cfg.decode, device, cfg.model.max_positions,
                                           sources, refs, target_lang=pair.tgt if multilingual else None)
        per_pair[pair.name] = {**scores, "sentences": len(sources)}
        examples.append(list(zip(sources, refs, hyps, strict=True)))
    scores = next(iter(per_pair.values())) if len(pairs) == 1 else mean_over_pairs(per_pair)
    result = {
        "checkpoint": str(paths[0]),
        **({"members": [str(path) for path in paths]} if len(paths) > 1 else {}),
        **scores,
        "sentences": sum(p["sentences"] for p in per_pair.values()),
        "decode": {"strategy": cfg.decode.strategy, "beam_size": cfg.decode.beam_size,
                   "length_penalty": cfg.decode.length_penalty, "alpha": cfg.decode.alpha},
    }
    if len(pairs) > 1:
        result["pairs"] = {name: {k: s[k] for k in ("bleu", "chrf", "sentences")} for name, s in per_pair.items()}
    take = -(-samples // len(pairs))  # per pair, rounded up
    chosen = [row for rows in zip(*(rows[:take] for rows in examples), strict=False) for row in rows][:samples]
    return result, chosen
