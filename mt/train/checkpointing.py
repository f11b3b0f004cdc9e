"""The run's checkpoints: save (numbered, last.pt, best.pt, pruning), resume, and best tracking.

A run directory belongs to one model: resuming refuses a checkpoint written with other model
settings or another vocabulary, before any weight is loaded, naming the keys that differ.
"""

from __future__ import annotations

import dataclasses
import logging
import math
from pathlib import Path
from typing import Any

import torch

from mt import checkpoint as ckpt
from mt.config import Config, ModelConfig, to_dict
from mt.data import Tokenizers
from mt.train.distributed import DistInfo, all_gather_objects, barrier
from mt.train.ema import WeightAverage
from mt.train.state import TrainState, rng_state, set_rng_state

logger = logging.getLogger(__name__)

# model settings that change neither the weights' shapes nor what they compute: free to change on resume
RESUMABLE_MODEL_KEYS = frozenset({"name", "dropout", "attention_dropout", "activation_dropout"})


class Checkpointer:
    """Saves and restores one run's model, optimizer, scaler, progress and random generators."""

    def __init__(
        self, run_dir: Path, *, dist: DistInfo, keep_last: int, model: torch.nn.Module,
        optimizer: torch.optim.Optimizer, scaler: torch.amp.GradScaler | None, cfg: Config, tokenizers: Tokenizers,
        average: WeightAverage | None = None,
    ) -> None:
        self.run_dir, self.directory = run_dir, run_dir / "checkpoints"
        self.dist, self.keep_last = dist, keep_last
        self.model, self.optimizer, self.scaler = model, optimizer, scaler
        self.average = average  # train.ema_decay: the checkpoints' model is this average
        self.cfg, self.tokenizers = cfg, tokenizers
        self.saved_step = -1  # the step of the newest checkpoint on disk (-1: none of this run yet)

    @property
    def last_path(self) -> Path:
        return self.directory / "last.pt"

    @property
    def best_path(self) -> Path:
        return self.directory / "best.pt"

    def save(self, state: TrainState, *, is_best: bool = False) -> Path | None:
        """Write ``checkpoint_<step>.pt`` atomically, point last.pt (and best.pt) at it, prune; every rank calls."""
        rngs = all_gather_objects(rng_state(), self.dist)  # every rank's generators, for exact resume
        path = None
        if self.dist.is_main:
            path = ckpt.save_checkpoint(self.directory / f"checkpoint_{state.step}.pt", self._contents(state, rngs))
            ckpt.link_checkpoint(path, self.last_path)
            if is_best:
                ckpt.link_checkpoint(path, self.best_path)
            ckpt.prune_checkpoints(self.directory, self.keep_last)
        barrier(self.dist)
        self.saved_step = state.step
        return path

    def _contents(self, state: TrainState, rngs: list) -> dict[str, Any]:
        weights: dict[str, Any] = {"model": self.model.state_dict()}
        if self.average is not None:  # inference gets the average; a resume the optimizer's weights
            weights = {"model": self.average.state_dict(), ckpt.RAW_MODEL_KEY: weights["model"]}
        return {
            "version": 1,
            **weights,
            "optimizer": self.optimizer.state_dict(),
            "scaler": self.scaler.state_dict() if self.scaler is not None else None,
            "train_state": state.to_dict(),
            "rng": rngs,
            "world_size": self.dist.world_size,
            "config": to_dict(self.cfg),
            "tokenizers": ckpt.tokenizers_state(self.tokenizers),
        }

    def resume(self, device: torch.device) -> tuple[TrainState, Path | None]:
        """Restore ``last.pt`` (or the newest readable numbered checkpoint); a fresh state when there is none."""
        candidates = [self.last_path] + [p for _, p in reversed(ckpt.list_checkpoints(self.directory))]
        for path in candidates:
            if not path.exists():
                continue
            try:
                stored = ckpt.load_checkpoint(path, map_location=device)
            except ckpt.CheckpointError as e:
                logger.warning("%s; trying an older checkpoint", e)
                continue
            check_same_model(stored, self.cfg, self.tokenizers, run_dir=self.run_dir, path=path)
            state = self._restore(stored)
            self.saved_step = state.step
            if self.dist.is_main:
                print(f"Resumed from {path} at update {state.step}", flush=True)
            return state, path
        return TrainState(), None

    def restart(self, path: Path, device: torch.device) -> TrainState:
        """Go on from another run's checkpoint with the update count, clock and best at 0 (a warm restart):
        its weights, optimizer moments, data position and random generators are restored."""
        stored = ckpt.load_checkpoint(path, map_location=device)  # CheckpointError names a missing file
        check_same_model(stored, self.cfg, self.tokenizers, run_dir=self.run_dir, path=path)
        restored = self._restore(stored)
        state = TrainState(epoch=restored.epoch, batch_in_epoch=restored.batch_in_epoch)
        if self.dist.is_main:
            print(f"Restarted from {path} (its update {restored.step}): updates, lr schedule and clock "
                  "start again", flush=True)
        return state

    def _restore(self, stored: dict[str, Any]) -> TrainState:
        self.model.load_state_dict(stored.get(ckpt.RAW_MODEL_KEY, stored["model"]))
        if self.average is not None and ckpt.RAW_MODEL_KEY in stored:
            self.average.load_state_dict(stored["model"])
        elif self.average is not None:  # written without train.ema_decay: the average starts here
            self.average.restart_from_model()
        self.optimizer.load_state_dict(stored["optimizer"])
        if self.scaler is not None and stored.get("scaler"):
            self.scaler.load_state_dict(stored["scaler"])
        state = TrainState.from_dict(stored["train_state"])
        rngs = stored.get("rng") or []
        if stored.get("world_size") == self.dist.world_size and len(rngs) == self.dist.world_size:
            set_rng_state(rngs[self.dist.rank])
        else:
            # Rule: with another number of ranks the shards differ, so the rest of the
            # interrupted epoch is skipped and training goes on from the next epoch.
            logger.warning(
                "resuming with %d ranks from a checkpoint written by %s: continuing at epoch %d",
                self.dist.world_size, stored.get("world_size"), state.epoch + 1,
            )
            state.epoch += 1
            state.batch_in_epoch = 0
            torch.manual_seed(self.cfg.train.seed + state.step + 1000 * self.dist.rank)
        return state


def check_same_model(stored: dict[str, Any], cfg: Config, tokenizers: Tokenizers, *, run_dir: Path, path: Path) -> None:
    """Raise ``CheckpointError`` naming the differences when ``stored`` is not a checkpoint of this model."""
    differences = model_differences(stored, cfg, tokenizers)
    if differences:
        raise ckpt.CheckpointError(
            f"run dir {run_dir} holds a checkpoint of another model ({', '.join(differences)}; "
            f"{path.name} vs this config): use a new train.run_dir or the same settings"
        )


def model_differences(stored: dict[str, Any], cfg: Config, tokenizers: Tokenizers) -> list[str]:
    """``"group.key stored vs now"`` for each model or vocabulary setting that differs."""
    stored_cfg = stored.get("config") or {}
    before = {**dataclasses.asdict(ModelConfig()), **(stored_cfg.get("model") or {})}
    now = dataclasses.asdict(cfg.model)
    out = [
        f"model.{k} {before[k]} vs {now[k]}" for k in now if k not in RESUMABLE_MODEL_KEYS and before[k] != now[k]
    ]
    stored_data = stored_cfg.get("data") or {}
    for key in ("vocab_size", "joint_vocab"):
        if key in stored_data and stored_data[key] != getattr(cfg.data, key):
            out.append(f"data.{key} {stored_data[key]} vs {getattr(cfg.data, key)}")
    if not any(d.startswith("data.") for d in out):
        out += _vocabulary_differences(stored.get("tokenizers"), tokenizers)
    return out


def _vocabulary_differences(stored: dict[str, Any] | None, tokenizers: Tokenizers) -> list[str]:
    """Vocabulary sizes that differ although the settings agree (e.g. other data in the same run dir)."""
    if stored is None:
        return []
    before = ckpt.tokenizers_from_state({"tokenizers": stored})
    src, tgt = before.src, before.tgt
    out = []
    for name, before, now in (("source", src, tokenizers.src), ("target", tgt, tokenizers.tgt)):
        if before.vocab_size != now.vocab_size:
            out.append(f"{name} vocabulary {before.vocab_size} vs {now.vocab_size} pieces")
    return out


def record_validation(state: TrainState, scores: dict[str, Any], best_metric: str) -> bool:
    """Update the best score and the patience counter in ``state``; True when this validation is the best.

    Higher BLEU or lower loss is better; without BLEU scores the loss is tracked.
    """
    name = best_metric if best_metric in scores else "loss"
    metric = scores.get(name)
    if metric is None or not math.isfinite(metric):
        return False
    if state.best_metric is None or (metric > state.best_metric if name == "bleu" else metric < state.best_metric):
        state.best_metric, state.best_step, state.bad_validations = metric, state.step, 0
        state.best_metric_name = name
        return True
    state.bad_validations += 1
    return False
