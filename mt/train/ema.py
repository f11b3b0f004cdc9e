"""An exponential moving average of the weights (``train.ema_decay``; Polyak averaging).

After every update ``average = d * average + (1 - d) * weights`` with ``d = min(ema_decay, (1 + t) / (10 + t))``
at update ``t``: early on the average follows the weights closely instead of holding on to the random
initialisation, later it spans about the last ``1 / (1 - d)`` updates (TensorFlow's ``num_updates`` warm-up).

The average is what a run shows and keeps: validation scores it, and a checkpoint's ``model`` holds it, so
``best.pt``, checkpoint averaging, the test, distillation, decoding and export all use it unchanged. The
optimizer's own weights go beside it (``mt.checkpoint.RAW_MODEL_KEY``), from where a resume restores them;
a checkpoint without that key holds no average (``ema_decay`` 0 when written): its ``model`` is the
optimizer's weights.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

import torch
from torch import Tensor, nn


class WeightAverage:
    """The moving average of ``model``'s parameters (buffers are taken from the model as they are)."""

    def __init__(self, model: nn.Module, decay: float) -> None:
        if not 0 < decay < 1:
            raise ValueError(f"train.ema_decay must be in (0, 1), got {decay}")
        self.model, self.decay = model, decay
        named = list(model.named_parameters())  # tied weights appear once
        self.names = [name for name, _ in named]
        self.params = [p for _, p in named]
        self.average = [p.detach().clone() for p in self.params]

    def decay_at(self, step: int) -> float:
        """The weight of the old average after update ``step`` (1-based)."""
        return min(self.decay, (1 + step) / (10 + step))

    @torch.no_grad()
    def update(self, step: int) -> None:
        """Fold the weights after update ``step`` into the average."""
        torch._foreach_lerp_(self.average, self.params, 1 - self.decay_at(step))  # one call, as Adam's foreach

    def state_dict(self) -> dict[str, Tensor]:
        """The model's state dict with the average in place of every parameter (tied names included)."""
        by_storage = {p.data_ptr(): a for p, a in zip(self.params, self.average, strict=True)}
        return {key: by_storage.get(value.data_ptr(), value) for key, value in self.model.state_dict().items()}

    def load_state_dict(self, weights: dict[str, Tensor]) -> None:
        """Take the average from a checkpoint's ``model`` (written by ``state_dict``)."""
        _copy_into(self.average, [weights[name] for name in self.names])

    def restart_from_model(self) -> None:
        """The average starts again from the model's current weights (a run that had none)."""
        _copy_into(self.average, self.params)

    @contextlib.contextmanager
    def applied(self) -> Iterator[None]:
        """Inside the block the model holds the average (to validate it); its own weights after."""
        own = [p.detach().clone() for p in self.params]
        _copy_into(self.params, self.average)
        try:
            yield
        finally:
            _copy_into(self.params, own)


@torch.no_grad()
def _copy_into(targets: list[Tensor], sources: list[Tensor]) -> None:
    torch._foreach_copy_(targets, sources)
