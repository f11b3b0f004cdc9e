"""One run's stages wired together: set-up, resume, the update loop, validation and checkpoints.

``Trainer(cfg)`` builds the components (``setup``) and resumes from ``run_dir/checkpoints/last.pt``
when it exists (``checkpointing``), so re-running a command after a crash continues where it
stopped, with the same next losses; a first start with ``train.restart_from`` goes on from that
checkpoint with its update count and lr schedule at 0 (a warm restart). ``run()`` drives the
``UpdateLoop`` and owns what happens at its boundaries: validation (sharded over ranks), best
tracking, saving, and the checkpoint a signal leaves. With ``train.ema_decay`` a moving average of the
weights (``mt.train.ema``) is what it validates and checkpoints as the model.
"""

from __future__ import annotations

import contextlib
from pathlib import Path

from mt.config import Config
from mt.data import subword_sampling
from mt.train.checkpointing import Checkpointer, record_validation
from mt.train.ema import WeightAverage
from mt.train.metrics_log import MetricsLog
from mt.train.setup import build_components, seed_ranks, step_context
from mt.train.updates import Clock, UpdateLoop
from mt.train.validate import ValidationSettings, validate


class Trainer:
    """Builds the components of a run from a typed ``Config``, resumes it, and trains."""

    def __init__(self, cfg: Config) -> None:
        parts = self.parts = build_components(cfg)
        self.cfg, self.dist, self.device, self.model = parts.cfg, parts.dist, parts.device, parts.model
        tc = self.cfg.train
        self.run_dir = Path(tc.run_dir)
        self.average = WeightAverage(parts.model, tc.ema_decay) if tc.ema_decay > 0 else None
        self.checkpoints = Checkpointer(
            self.run_dir, dist=self.dist, keep_last=tc.keep_last, model=parts.model, optimizer=parts.optimizer,
            scaler=parts.scaler, cfg=self.cfg, tokenizers=parts.tokenizers, average=self.average,
        )
        self.state, self.resumed_from = self.checkpoints.resume(self.device)  # refuses another model's run dir
        self.metrics = MetricsLog(self.run_dir, enabled=self.dist.is_main, tensorboard=tc.tensorboard)
        if self.resumed_from is None and tc.restart_from:  # a warm restart; once it saved, a resume instead
            self.state = self.checkpoints.restart(Path(tc.restart_from), self.device)
        elif self.resumed_from is None:
            seed_ranks(tc.seed, self.dist)  # after a resume or a restart the restored generators go on instead
        self.step_ctx = step_context(parts)
        self.valid_settings = ValidationSettings.from_config(self.cfg)
        self.clock = Clock(self.state.train_seconds)

    @property
    def ckpt_dir(self) -> Path:
        return self.checkpoints.directory

    def run(self, progress: bool | None = None) -> str:
        """Train until a stop condition and return its name; every exit but an abort leaves a checkpoint."""
        tc = self.cfg.train
        show = (tc.progress if progress is None else progress) and self.dist.is_main
        self.clock = Clock(self.state.train_seconds)
        reason = self.update_loop().run(validate_and_save=self.validate_and_save, save=self.save, progress=show)
        if reason.startswith("signal"):
            path = self.save()
            if self.dist.is_main:
                print(
                    f"Stopped by {reason} at update {self.state.step}; checkpoint saved to {path}. "
                    "Run the same command again to resume.",
                    flush=True,
                )
        elif self.checkpoints.saved_step != self.state.step or not self.checkpoints.best_path.exists():
            self.validate_and_save()  # the final weights are validated and saved; a run always ends with a best.pt
        self.metrics.close()
        return reason

    def update_loop(self) -> UpdateLoop:
        """The loop over the training split from the current state (its batches subword-sampled when asked)."""
        return UpdateLoop(
            self.step_ctx, self.parts.data.splits["train"], self.parts.sampler, self.state, self.cfg,
            metrics=self.metrics, clock=self.clock, last_checkpoint=self.checkpoints.last_path,
            sampling=subword_sampling(self.cfg.data, self.parts.tokenizers, self.cfg.model.max_positions),
            average=self.average,
        )

    def save(self, is_best: bool = False) -> Path | None:
        """Checkpoint the current state (every rank calls; rank 0 writes)."""
        self.state.train_seconds = self.clock.elapsed()
        return self.checkpoints.save(self.state, is_best=is_best)

    def validate_and_save(self) -> bool:
        """Validate on every rank (each its share; the moving average of the weights with ``train.ema_decay``),
        save (marking the best), and say whether to stop early."""
        tc = self.cfg.train
        with self.average.applied() if self.average is not None else contextlib.nullcontext():
            scores = validate(self.model, self.parts.tokenizers, self.parts.data.splits["valid"],
                              self.valid_settings, self.device, dist=self.dist)  # the same scores on every rank
        self.metrics.log("valid", self.state.step, **scores)  # rank 0 only: the log is off elsewhere
        is_best = record_validation(self.state, scores, tc.best_metric)
        self.save(is_best=is_best or not self.checkpoints.best_path.exists())
        return tc.patience > 0 and self.state.bad_validations >= tc.patience
