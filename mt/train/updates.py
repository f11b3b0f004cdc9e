"""The update loop: batches grouped into updates, stop conditions, skipped updates, logging, progress.

``UpdateLoop.run`` trains until a stop condition and returns its name. It does not know how to
validate or save: the caller passes those two actions, and the loop calls them every
``validate_every`` / ``save_every`` updates.
"""

from __future__ import annotations

import logging
import math
import time
from collections.abc import Callable
from pathlib import Path

from mt.config import Config
from mt.data import Batch, SubwordSampling, TokenBatchSampler, TokenizedSplit, collate
from mt.train.distributed import all_reduce_sum
from mt.train.ema import WeightAverage
from mt.train.metrics_log import MetricsLog, MetricWindow
from mt.train.optim import set_lr
from mt.train.progress import Progress
from mt.train.schedule import budget_progress, learning_rate
from mt.train.signals import GracefulStop
from mt.train.state import TrainState
from mt.train.step import StepContext, StepResult, train_step

logger = logging.getLogger(__name__)


class TrainingAborted(RuntimeError):
    """Too many non-finite updates in a row; the last good checkpoint is left as it was."""


class Clock:
    """Wall time spent training, summed over restarts (``base_seconds`` comes from the checkpoint)."""

    def __init__(self, base_seconds: float) -> None:
        self.base_seconds, self.started = base_seconds, time.monotonic()

    def elapsed(self) -> float:
        return self.base_seconds + (time.monotonic() - self.started)


class UpdateLoop:
    """Runs updates on ``split`` from the position in ``state``, advancing ``state`` as it goes."""

    def __init__(
        self, ctx: StepContext, split: TokenizedSplit, sampler: TokenBatchSampler, state: TrainState, cfg: Config,
        *, metrics: MetricsLog, clock: Clock, last_checkpoint: Path, sampling: SubwordSampling | None = None,
        average: WeightAverage | None = None,
    ) -> None:
        self.ctx, self.split, self.sampler, self.state, self.cfg = ctx, split, sampler, state, cfg
        self.sampling = sampling  # subword regularisation of the training batches (None = binarized ids)
        self.average = average  # train.ema_decay: updated after every applied update
        self.metrics, self.clock, self.last_checkpoint = metrics, clock, last_checkpoint
        self.window = MetricWindow()
        self.compile_pending = cfg.train.compile  # the first update compiles; its time is logged once

    def run(self, *, validate_and_save: Callable[[], bool], save: Callable[[], object], progress: bool) -> str:
        """Train until a stop condition and return its name; ``validate_and_save`` says True to stop early."""
        tc, state = self.cfg.train, self.state
        bar = Progress(total=tc.max_updates, initial=state.step, enabled=progress)
        reason = None
        with GracefulStop() as stop:
            while reason is None:
                for group in self.micro_batch_groups():
                    reason = self.stop_reason(stop)
                    if reason is not None:
                        break
                    if not self.one_update(group, bar):
                        continue
                    if state.step % tc.validate_every == 0:
                        if validate_and_save():
                            reason = "early stopping"
                            break
                    elif state.step % tc.save_every == 0:
                        save()
                else:
                    state.epoch += 1
                    state.batch_in_epoch = 0
                    if tc.max_epochs and state.epoch >= tc.max_epochs:
                        reason = "max_epochs"
        bar.close()
        return reason

    def micro_batch_groups(self) -> list[list[list[int]]]:
        """The rest of this epoch's batches, grouped into updates of ``update_freq`` micro-batches."""
        batches = self.sampler.batches(self.state.epoch)[self.state.batch_in_epoch :]
        k = self.cfg.train.update_freq
        return [batches[i : i + k] for i in range(0, len(batches), k)]

    def stop_reason(self, stop: GracefulStop) -> str | None:
        """A signal, ``max_updates`` or ``max_time_minutes``, agreed on by every rank."""
        tc = self.cfg.train
        reasons = [
            stop.requested is not None,
            self.state.step >= tc.max_updates,
            tc.max_time_minutes > 0 and self.clock.elapsed() >= tc.max_time_minutes * 60,
        ]
        flags = all_reduce_sum([float(r) for r in reasons], self.ctx.dist, self.ctx.device)
        if flags[0]:
            return f"signal ({stop.requested or 'on another rank'})"
        if flags[1]:
            return "max_updates"
        if flags[2]:
            return "max_time_minutes"
        return None

    def one_update(self, group: list[list[int]], bar: Progress) -> bool:
        """Run one update; False when it was skipped (non-finite or out of memory)."""
        cfg, state = self.cfg, self.state
        micro = [batch.to(self.ctx.device) for batch in self.collate_update(group)]
        progress = budget_progress(state.step, self.clock.elapsed(), cfg.train)
        lr = learning_rate(state.step + 1, cfg.optim, cfg.model.d_model, progress)
        set_lr(self.ctx.optimizer, lr)
        t0 = time.monotonic()
        result = train_step(self.ctx, micro)
        if self.compile_pending:
            self.compile_pending = False
            logger.info("torch.compile: the first update took %.1f s, compilation included", time.monotonic() - t0)
        state.batch_in_epoch += len(group)
        if result.skipped is not None:
            self.record_skip(result)
            return False
        state.step += 1
        state.nonfinite_in_a_row = 0
        if self.average is not None:
            self.average.update(state.step)
        self.window.add(result, time.monotonic() - t0)
        bar.update(state.step, loss=result.loss_sum / max(result.ntokens, 1) / math.log(2), lr=lr,
                   tok_s=self.window.tokens_per_s(), spent=budget_progress(state.step, self.clock.elapsed(), cfg.train))
        if state.step % cfg.train.log_every == 0:
            self.metrics.log("train", state.step, lr=lr, epoch=state.epoch, **self.window.flush())
        return True

    def collate_update(self, group: list[list[int]]) -> list[Batch]:
        """The update's micro-batches. With subword sampling, batch ``j`` of the epoch (this rank's) is
        re-segmented under ``(train.seed, epoch, j, rank)``, so a resumed run samples what this one would,
        and may come back as several micro-batches (its sampled pieces outgrew ``data.max_tokens``)."""
        if self.sampling is None:
            return [collate(self.split, idx, self.cfg.data.pad_to_multiple) for idx in group]
        seed, epoch, first, rank = self.cfg.train.seed, self.state.epoch, self.state.batch_in_epoch, self.ctx.dist.rank
        keys = [(seed, epoch, first + j, rank) for j in range(len(group))]
        return [b for idx, key in zip(group, keys, strict=True) for b in self.sampling.collate(self.split, idx, key)]

    def record_skip(self, result: StepResult) -> None:
        """Count a skipped update; abort after ``max_nonfinite_in_a_row`` non-finite ones in a row."""
        state = self.state
        if result.skipped == "oom":
            state.skipped_oom += 1
            return
        state.skipped_nonfinite += 1
        state.nonfinite_in_a_row += 1
        logger.warning("non-finite loss/gradient at update %d: update skipped", state.step + 1)
        limit = self.cfg.train.max_nonfinite_in_a_row
        if state.nonfinite_in_a_row >= limit:
            last = self.last_checkpoint
            raise TrainingAborted(
                f"{limit} non-finite updates in a row (at update {state.step + 1}): training aborted. "
                f"The last good checkpoint is intact: {last if last.exists() else 'none written yet'}. "
                "Lower the learning rate, set optim.clip_norm, or train in fp32."
            )
