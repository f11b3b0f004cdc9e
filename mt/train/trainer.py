"""The training loop: config -> components -> updates, validation, checkpoints.

``Trainer(cfg).run()`` is the whole job. Construction builds the components (data, tokenizers,
model, optimizer, sampler) and resumes from ``run_dir/checkpoints/last.pt`` when it exists, so
re-running a command after a crash continues where it stopped, with the same next losses.
"""

from __future__ import annotations

import contextlib
import dataclasses
import logging
import math
import random
import time
from pathlib import Path

import torch
from torch.nn.parallel import DistributedDataParallel

from mt import checkpoint as ckpt
from mt.config import Config, to_dict
from mt.data import PAD_ID, PreparedData, TokenBatchSampler, collate, prepare_data
from mt.model import build_model
from mt.train.distributed import DistInfo, all_gather_objects, all_reduce_sum, barrier, init_distributed
from mt.train.metrics_log import MetricsLog
from mt.train.optim import build_optimizer, set_lr
from mt.train.schedule import learning_rate
from mt.train.signals import GracefulStop
from mt.train.state import TrainState, rng_state, set_rng_state
from mt.train.step import StepContext, StepResult, train_step
from mt.train.validate import validate

logger = logging.getLogger(__name__)


class TrainingAborted(RuntimeError):
    """Too many non-finite updates in a row; the last good checkpoint is left as it was."""


def resolve_device(name: str) -> torch.device:
    if name == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    return torch.device(name)


def _autocast_factory(precision: str, device: torch.device):
    if precision == "fp32":
        return contextlib.nullcontext
    if precision not in ("bf16", "fp16"):
        raise ValueError(f"train.precision must be fp32, bf16 or fp16, got {precision!r}")
    if precision == "fp16" and device.type != "cuda":
        raise ValueError("train.precision=fp16 needs CUDA; use bf16 on CPU")
    dtype = torch.bfloat16 if precision == "bf16" else torch.float16
    return lambda: torch.autocast(device_type=device.type, dtype=dtype)


class Trainer:
    """Builds the components of a run from a typed ``Config`` and trains them."""

    def __init__(self, cfg: Config) -> None:
        self.cfg = cfg
        tc = cfg.train
        if tc.threads > 0:
            torch.set_num_threads(tc.threads)
        self.device = resolve_device(tc.device)
        self.dist: DistInfo = init_distributed(self.device.type)
        if self.device.type == "cuda" and self.dist.enabled:
            self.device = torch.device("cuda", self.dist.local_rank)
        self.run_dir = Path(tc.run_dir)
        self.ckpt_dir = self.run_dir / "checkpoints"
        self.data = self._prepare_data()
        self.tokenizers = self.data.tokenizers
        if not self.tokenizers.joint and cfg.model.share_all_embeddings:
            logger.info("separate vocabularies: tying only the decoder's input and output embeddings")
            cfg = self.cfg = dataclasses.replace(cfg, model=dataclasses.replace(cfg.model, share_all_embeddings=False))

        torch.manual_seed(tc.seed)  # identical initial weights on every rank
        self.model = build_model(
            cfg.model, self.tokenizers.src.padded_vocab_size, self.tokenizers.tgt.padded_vocab_size, PAD_ID
        ).to(self.device)
        self.optimizer = build_optimizer(self.model, cfg.optim)
        self.scaler = torch.amp.GradScaler("cuda") if tc.precision == "fp16" else None
        train = self.data.splits["train"]
        self.sampler = TokenBatchSampler(
            train.src_lens, train.tgt_lens, cfg.data.max_tokens, seed=tc.seed, shuffle=True,
            rank=self.dist.rank, world_size=self.dist.world_size,
            pad_to_multiple=cfg.data.pad_to_multiple, shuffle_chunk=cfg.data.shuffle_chunk,
        )
        self.state = TrainState()
        self.metrics = MetricsLog(self.run_dir, enabled=self.dist.is_main, tensorboard=tc.tensorboard)
        if len(self.sampler) == 0:
            raise RuntimeError(f"the training split of {cfg.data.source!r} yields no batches")
        self.resumed_from = self._maybe_resume()
        self._saved_step = self.state.step if self.resumed_from is not None else -1
        self._base_seconds, self._started = self.state.train_seconds, time.monotonic()
        # dropout differs per rank; the seed is re-drawn after resuming only when nothing was restored
        if self.resumed_from is None:
            torch.manual_seed(tc.seed + 1000 * self.dist.rank)
            random.seed(tc.seed + 1000 * self.dist.rank)
        wrapped = self.model
        if self.dist.enabled:
            ids = [self.device.index] if self.device.type == "cuda" else None
            wrapped = DistributedDataParallel(self.model, device_ids=ids)
        self.step_ctx = StepContext(
            model=wrapped, optimizer=self.optimizer, dist=self.dist, device=self.device,
            label_smoothing=cfg.optim.label_smoothing, pad_id=PAD_ID, clip_norm=cfg.optim.clip_norm,
            autocast=_autocast_factory(tc.precision, self.device), scaler=self.scaler,
        )

    # ----------------------------------------------------------------------------- set-up
    def _prepare_data(self) -> PreparedData:
        """Rank 0 trains the tokenizer and binarizes; the other ranks then read its cache."""
        if self.dist.is_main:
            data = prepare_data(self.cfg.data)
        barrier(self.dist)
        if not self.dist.is_main:
            data = prepare_data(self.cfg.data)
        return data

    def _maybe_resume(self) -> Path | None:
        """Load ``last.pt`` (or the newest readable numbered checkpoint) if the run has one."""
        candidates = [self.ckpt_dir / "last.pt"] + [p for _, p in reversed(ckpt.list_checkpoints(self.ckpt_dir))]
        for path in candidates:
            if not path.exists():
                continue
            try:
                state = ckpt.load_checkpoint(path, map_location=self.device)
            except ckpt.CheckpointError as e:
                logger.warning("%s; trying an older checkpoint", e)
                continue
            self._restore(state)
            if self.dist.is_main:
                print(f"Resumed from {path} at update {self.state.step}", flush=True)
            return path
        return None

    def _restore(self, state: dict) -> None:
        self.model.load_state_dict(state["model"])
        self.optimizer.load_state_dict(state["optimizer"])
        if self.scaler is not None and state.get("scaler"):
            self.scaler.load_state_dict(state["scaler"])
        self.state = TrainState.from_dict(state["train_state"])
        rngs = state.get("rng") or []
        if state.get("world_size") == self.dist.world_size and len(rngs) == self.dist.world_size:
            set_rng_state(rngs[self.dist.rank])
        else:
            # Rule: with another number of ranks the shards differ, so the rest of the
            # interrupted epoch is skipped and training goes on from the next epoch.
            logger.warning(
                "resuming with %d ranks from a checkpoint written by %s: continuing at epoch %d",
                self.dist.world_size, state.get("world_size"), self.state.epoch + 1,
            )
            self.state.epoch += 1
            self.state.batch_in_epoch = 0
            torch.manual_seed(self.cfg.train.seed + self.state.step + 1000 * self.dist.rank)

    # ----------------------------------------------------------------------------- checkpoints
    def checkpoint_state(self, rngs: list) -> dict:
        return {
            "version": 1,
            "model": self.model.state_dict(),
            "optimizer": self.optimizer.state_dict(),
            "scaler": self.scaler.state_dict() if self.scaler is not None else None,
            "train_state": self.state.to_dict(),
            "rng": rngs,
            "world_size": self.dist.world_size,
            "config": to_dict(self.cfg),
            "tokenizers": ckpt.tokenizers_state(self.tokenizers),
        }

    def save(self, is_best: bool = False) -> Path | None:
        """Write ``checkpoint_<step>.pt`` atomically, point last.pt (and best.pt) at it, prune."""
        self.state.train_seconds = self._elapsed()
        rngs = all_gather_objects(rng_state(), self.dist)  # every rank's generators, for exact resume
        path = None
        if self.dist.is_main:
            path = ckpt.save_checkpoint(self.ckpt_dir / f"checkpoint_{self.state.step}.pt", self.checkpoint_state(rngs))
            ckpt.link_checkpoint(path, self.ckpt_dir / "last.pt")
            if is_best:
                ckpt.link_checkpoint(path, self.ckpt_dir / "best.pt")
            ckpt.prune_checkpoints(self.ckpt_dir, self.cfg.train.keep_last)
        barrier(self.dist)
        self._saved_step = self.state.step
        return path

    # ----------------------------------------------------------------------------- the loop
    def _micro_batch_groups(self) -> list[list[list[int]]]:
        """The rest of this epoch's batches, grouped into updates of ``update_freq`` micro-batches."""
        batches = self.sampler.batches(self.state.epoch)[self.state.batch_in_epoch :]
        k = self.cfg.train.update_freq
        return [batches[i : i + k] for i in range(0, len(batches), k)]

    def _should_stop(self, stop: GracefulStop) -> str | None:
        tc = self.cfg.train
        elapsed = self._elapsed()
        reasons = [
            stop.requested is not None,
            self.state.step >= tc.max_updates,
            tc.max_time_minutes > 0 and elapsed >= tc.max_time_minutes * 60,
        ]
        flags = all_reduce_sum([float(r) for r in reasons], self.dist, self.device)  # ranks agree
        if flags[0]:
            return f"signal ({stop.requested or 'on another rank'})"
        if flags[1]:
            return "max_updates"
        if flags[2]:
            return "max_time_minutes"
        return None

    def _handle_skip(self, result: StepResult) -> None:
        if result.skipped == "oom":
            self.state.skipped_oom += 1
            return
        self.state.skipped_nonfinite += 1
        self.state.nonfinite_in_a_row += 1
        logger.warning("non-finite loss/gradient at update %d: update skipped", self.state.step + 1)
        limit = self.cfg.train.max_nonfinite_in_a_row
        if self.state.nonfinite_in_a_row >= limit:
            last = self.ckpt_dir / "last.pt"
            raise TrainingAborted(
                f"{limit} non-finite updates in a row (at update {self.state.step + 1}): training aborted. "
                f"The last good checkpoint is intact: {last if last.exists() else 'none written yet'}. "
                "Lower the learning rate, set optim.clip_norm, or train in fp32."
            )

    def _elapsed(self) -> float:
        return self._base_seconds + (time.monotonic() - self._started)

    def run(self, progress: bool | None = None) -> str:
        """Train until a stop condition and return its name; every exit but an abort leaves a checkpoint."""
        from mt.train.progress import Progress

        tc = self.cfg.train
        show = (tc.progress if progress is None else progress) and self.dist.is_main
        bar = Progress(total=tc.max_updates, initial=self.state.step, enabled=show)
        self._base_seconds, self._started = self.state.train_seconds, time.monotonic()
        window = _Window()
        reason = None
        with GracefulStop() as stop:
            while reason is None:
                for group in self._micro_batch_groups():
                    reason = self._should_stop(stop)
                    if reason is not None:
                        break
                    if not self._one_update(group, window, bar):
                        continue
                    if self.state.step % tc.validate_every == 0:
                        if self._validate_and_save():
                            reason = "early stopping"
                            break
                    elif self.state.step % tc.save_every == 0:
                        self.save()
                else:
                    self.state.epoch += 1
                    self.state.batch_in_epoch = 0
                    if tc.max_epochs and self.state.epoch >= tc.max_epochs:
                        reason = "max_epochs"
        bar.close()
        if reason.startswith("signal"):
            path = self.save()
            if self.dist.is_main:
                print(
                    f"Stopped by {reason} at update {self.state.step}; checkpoint saved to {path}. "
                    "Run the same command again to resume.",
                    flush=True,
                )
        elif self._saved_step != self.state.step:
            self._validate_and_save()
        self.metrics.close()
        return reason

    def _one_update(self, group: list[list[int]], window: _Window, bar) -> bool:
        """Run one update; False when it was skipped (non-finite or out of memory)."""
        train = self.data.splits["train"]
        micro = [collate(train, idx, self.cfg.data.pad_to_multiple).to(self.device) for idx in group]
        lr = learning_rate(self.state.step + 1, self.cfg.optim, self.cfg.model.d_model)
        set_lr(self.optimizer, lr)
        t0 = time.monotonic()
        result = train_step(self.step_ctx, micro)
        self.state.batch_in_epoch += len(group)
        if result.skipped is not None:
            self._handle_skip(result)
            return False
        self.state.step += 1
        self.state.nonfinite_in_a_row = 0
        window.add(result, time.monotonic() - t0)
        bar.update(self.state.step, loss=result.loss_sum / max(result.ntokens, 1) / math.log(2), lr=lr,
                   tok_s=window.tokens_per_s())
        if self.state.step % self.cfg.train.log_every == 0:
            self.metrics.log("train", self.state.step, lr=lr, epoch=self.state.epoch, **window.flush())
        return True

    def _validate_and_save(self) -> bool:
        """Validate on rank 0, save (marking the best), and say whether early stopping triggers."""
        tc = self.cfg.train
        scores = validate(self) if self.dist.is_main else {}
        scores = all_gather_objects(scores, self.dist)[0]
        if scores:
            self.metrics.log("valid", self.state.step, **scores)
        metric_name = tc.best_metric if tc.best_metric in scores else "loss"  # BLEU off: fall back to loss
        metric = scores.get(metric_name)
        is_best = False
        if metric is not None and math.isfinite(metric):
            better = self.state.best_metric is None or (
                metric > self.state.best_metric if metric_name == "bleu" else metric < self.state.best_metric
            )
            if better:
                self.state.best_metric, self.state.best_step, self.state.bad_validations = metric, self.state.step, 0
                self.state.best_metric_name = metric_name
                is_best = True
            else:
                self.state.bad_validations += 1
        if not (self.ckpt_dir / "best.pt").exists():
            is_best = True
        self.save(is_best=is_best)
        return tc.patience > 0 and self.state.bad_validations >= tc.patience


class _Window:
    """Sums over the updates since the last log line."""

    def __init__(self) -> None:
        self.reset()

    def reset(self) -> None:
        self.loss = self.nll = self.tokens = self.seconds = self.norm = 0.0
        self.updates = 0

    def add(self, r: StepResult, seconds: float) -> None:
        self.loss += r.loss_sum
        self.nll += r.nll_sum
        self.tokens += r.ntokens
        self.seconds += seconds
        self.norm += r.grad_norm
        self.updates += 1

    def tokens_per_s(self) -> float:
        return self.tokens / self.seconds if self.seconds > 0 else 0.0

    def flush(self) -> dict[str, float]:
        tokens = max(self.tokens, 1.0)
        nll = self.nll / tokens / math.log(2)  # bits, as fairseq reports
        out = {
            "loss": self.loss / tokens / math.log(2),
            "nll_loss": nll,
            "ppl": 2**nll,
            "grad_norm": self.norm / max(self.updates, 1),
            "tokens_per_s": self.tokens_per_s(),
            "updates_per_s": self.updates / self.seconds if self.seconds > 0 else 0.0,
            "ntokens": int(self.tokens),
        }
        self.reset()
        return out
