"""train.compile=true trains the same math as eager: the same losses and weights after a few updates."""

from __future__ import annotations

import torch
from helpers import tiny_config
from torch._dynamo.utils import counters

from mt.data import collate
from mt.train.optim import set_lr
from mt.train.setup import build_components, step_context
from mt.train.step import train_step


def _losses_and_weights(tmp, compile_: bool) -> tuple[list[float], dict[str, torch.Tensor]]:
    torch._dynamo.reset()
    counters.clear()
    cfg = tiny_config(tmp, f"train.compile={str(compile_).lower()}", "model.dropout=0.0")
    parts = build_components(cfg)
    ctx = step_context(parts)
    train = parts.data.splits["train"]
    set_lr(parts.optimizer, 1e-3)
    # different shapes: one dynamic graph serves them all
    batches = [collate(train, b, cfg.data.pad_to_multiple) for b in parts.sampler.batches(0)[:4]]
    # the regression case: the first batch's source and target share a padded length, the second's do not
    assert [(b.src.shape[1], b.tgt_in.shape[1]) for b in batches[:2]] == [(16, 16), (32, 24)]
    losses = [train_step(ctx, [b]).loss_sum for b in batches]
    return losses, {k: v.detach().clone() for k, v in parts.model.state_dict().items()}


def test_compiled_training_equals_eager(tmp_path):
    torch.set_num_threads(1)
    eager_losses, eager = _losses_and_weights(tmp_path / "eager", False)
    compiled_losses, compiled = _losses_and_weights(tmp_path / "compiled", True)
    assert counters["stats"]["unique_graphs"] == 1  # no recompilation for the later shapes
    assert eager.keys() == compiled.keys()  # checkpoints hold the eager model's names (no _orig_mod.)
    for a, b in zip(eager_losses, compiled_losses, strict=True):
        assert abs(a - b) <= 1e-4 * abs(a)
    # Matrices only: Adam (eps 1e-9) turns float noise on gradients that are zero in exact arithmetic
    # (the attention key bias's) into full-size steps, so biases are compared through the losses.
    for name, value in eager.items():
        if value.ndim >= 2:
            assert torch.allclose(value, compiled[name], atol=1e-5), name
