"""Everything about a run's progress that a checkpoint must hold to resume exactly."""

from __future__ import annotations

import random
from dataclasses import dataclass
from typing import Any

import torch


@dataclass
class TrainState:
    step: int = 0  # optimizer updates applied
    epoch: int = 0  # 0-based epoch the data position refers to
    batch_in_epoch: int = 0  # batches of this rank's shard already consumed in ``epoch``
    best_metric: float | None = None  # best valid BLEU (higher) or loss (lower)
    best_step: int = 0
    best_metric_name: str = ""  # "bleu" or "loss" (loss when BLEU is not computed)
    bad_validations: int = 0  # validations in a row without improvement (early stopping)
    nonfinite_in_a_row: int = 0
    skipped_nonfinite: int = 0
    skipped_oom: int = 0
    train_seconds: float = 0.0  # wall time spent training, summed over restarts

    def to_dict(self) -> dict[str, Any]:
        return dict(self.__dict__)

    @classmethod
    def from_dict(cls, values: dict[str, Any]) -> TrainState:
        known = {k: v for k, v in values.items() if k in cls.__dataclass_fields__}
        return cls(**known)


def rng_state() -> dict[str, Any]:
    """This process's random generators (dropout, sampling), as weights-only-loadable data."""
    state: dict[str, Any] = {"torch": torch.get_rng_state(), "python": random.getstate()}
    if torch.cuda.is_available() and torch.cuda.is_initialized():
        state["cuda"] = torch.cuda.get_rng_state_all()
    return state


def set_rng_state(state: dict[str, Any]) -> None:
    torch.set_rng_state(state["torch"])
    random.setstate(_as_tuple(state["python"]))
    if "cuda" in state and torch.cuda.is_available():
        torch.cuda.set_rng_state_all(state["cuda"])


def _as_tuple(value: Any) -> Any:
    """``random.setstate`` needs tuples back (a checkpoint may hand lists)."""
    return tuple(_as_tuple(v) for v in value) if isinstance(value, list | tuple) else value
