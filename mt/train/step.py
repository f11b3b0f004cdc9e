"""One optimizer update over ``update_freq`` micro-batches, normalised as one large batch.

Each micro-batch's loss is summed (not averaged) and back-propagated; after the last one the
gradients are multiplied by ``world_size / total_target_tokens`` (DDP averages over ranks, hence the
``world_size``). The update therefore equals the gradient of the whole update's mean token loss,
however the tokens were split over micro-batches and ranks (fairseq's ``multiply_grads``).
"""

from __future__ import annotations

import contextlib
import logging
import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import torch
from torch import nn

from mt.data import Batch
from mt.train.distributed import DistInfo, all_reduce_sum
from mt.train.loss import output_loss
from mt.train.rdrop import doubled, rdrop_output_loss

logger = logging.getLogger(__name__)


@dataclass
class StepResult:
    loss_sum: float  # smoothed loss summed over the update's target tokens (all ranks)
    nll_sum: float
    ntokens: int  # non-pad target tokens of the update (all ranks)
    grad_norm: float
    skipped: str | None = None  # "nonfinite" or "oom" when no update was applied


@dataclass
class StepContext:
    """What a step needs besides the batches; built once by the trainer."""

    model: nn.Module  # possibly DDP-wrapped
    output_weight: nn.Parameter  # (V, D) the unwrapped model's output projection, used by the loss
    optimizer: torch.optim.Optimizer
    dist: DistInfo
    device: torch.device
    label_smoothing: float
    pad_id: int
    clip_norm: float
    autocast: Callable[[], contextlib.AbstractContextManager]
    scaler: torch.amp.GradScaler | None = None
    rdrop_alpha: float = 0.0  # > 0: R-Drop (mt.train.rdrop), each batch twice
    logits_bias: torch.Tensor | None = None  # (V,) the model's fixed logits bias (an imported model's), if any


def _multiply_grads(params: Sequence[nn.Parameter], factor: float) -> None:
    grads = [p.grad for p in params if p.grad is not None]
    if grads:
        torch._foreach_mul_(grads, factor)


def _grad_norm(params: Sequence[nn.Parameter], clip_norm: float) -> float:
    max_norm = clip_norm if clip_norm > 0 else math.inf
    return float(torch.nn.utils.clip_grad_norm_(params, max_norm))


def _batch_loss(ctx: StepContext, batch: Batch) -> tuple[torch.Tensor, torch.Tensor]:
    """``(loss_sum, nll_sum)`` of one micro-batch: the label-smoothed loss, or R-Drop's with ``rdrop_alpha``."""
    if ctx.rdrop_alpha > 0:
        src, src_pad_mask, tgt_in = doubled(batch.src, batch.src_pad_mask, batch.tgt_in)
        hidden = ctx.model(src, src_pad_mask, tgt_in, project_output=False)  # (2B, T, D)
        return rdrop_output_loss(
            hidden, ctx.output_weight, batch.tgt_out, ctx.label_smoothing, ctx.rdrop_alpha, ctx.pad_id
        )
    hidden = ctx.model(batch.src, batch.src_pad_mask, batch.tgt_in, project_output=False)  # (B, T, D)
    return output_loss(hidden, ctx.output_weight, batch.tgt_out, ctx.label_smoothing, ctx.pad_id,
                       bias=ctx.logits_bias)


def train_step(ctx: StepContext, micro_batches: Sequence[Batch]) -> StepResult:
    """Forward/backward every micro-batch, then one optimizer step (or a counted skip)."""
    model, optimizer = ctx.model, ctx.optimizer
    model.train()
    optimizer.zero_grad(set_to_none=True)
    params = [p for p in model.parameters() if p.requires_grad]
    local_loss = local_nll = 0.0
    local_tokens = sum(b.ntokens for b in micro_batches)
    try:
        for i, batch in enumerate(micro_batches):
            last = i == len(micro_batches) - 1
            sync = contextlib.nullcontext() if last or not ctx.dist.enabled else model.no_sync()
            with sync:
                with ctx.autocast():
                    loss, nll = _batch_loss(ctx, batch)
                (ctx.scaler.scale(loss) if ctx.scaler is not None else loss).backward()
            local_loss += float(loss.detach())
            local_nll += float(nll.detach())
    except torch.OutOfMemoryError:
        if ctx.dist.enabled:
            raise  # the other ranks would wait forever in the all-reduce
        shapes = ", ".join(f"src {tuple(b.src.shape)} tgt {tuple(b.tgt_in.shape)}" for b in micro_batches)
        logger.warning("out of memory on batch [%s]: skipping it", shapes)
        optimizer.zero_grad(set_to_none=True)
        if ctx.device.type == "cuda":
            torch.cuda.empty_cache()
        return StepResult(0.0, 0.0, 0, math.nan, skipped="oom")

    loss_sum, nll_sum, ntokens = all_reduce_sum([local_loss, local_nll, float(local_tokens)], ctx.dist, ctx.device)
    _multiply_grads(params, ctx.dist.world_size / max(ntokens, 1.0))
    if ctx.scaler is not None:
        ctx.scaler.unscale_(optimizer)
    grad_norm = _grad_norm(params, ctx.clip_norm)
    if not (math.isfinite(grad_norm) and math.isfinite(loss_sum)):
        optimizer.zero_grad(set_to_none=True)
        if ctx.scaler is not None:
            ctx.scaler.update()  # lowers the fp16 scale; the step is skipped either way
        return StepResult(loss_sum, nll_sum, int(ntokens), grad_norm, skipped="nonfinite")
    if ctx.scaler is not None:
        ctx.scaler.step(optimizer)
        ctx.scaler.update()
    else:
        optimizer.step()
    return StepResult(loss_sum, nll_sum, int(ntokens), grad_norm)
