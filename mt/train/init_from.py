"""``train.init_from``: a new run that starts from another model's weights and tokenizers (fine-tuning).

The checkpoint's model group replaces the run's (its architecture; the run's dropout rates are kept), and
its tokenizers are written into the run directory and used as ``data.tokenizer``, so the run's data is
encoded with the model's own vocabulary (an imported model's included) and nothing is retrained. The
optimizer, the lr schedule and the update count start afresh; a run that is resumed reads its own
checkpoints instead (``train.checkpointing``), so resuming stays exact.
"""

from __future__ import annotations

import dataclasses
import logging
from pathlib import Path

import torch

from mt.checkpoint import CheckpointError, load_checkpoint, tokenizers_from_state
from mt.config import Config, to_config
from mt.data.binarize import atomic_dir
from mt.train.distributed import DistInfo, barrier

logger = logging.getLogger(__name__)

TOKENIZER_DIR = "init_tokenizer"  # under the run directory


def start_from(cfg: Config, dist: DistInfo) -> tuple[Config, dict[str, torch.Tensor]]:
    """``cfg`` with the model group and tokenizer of ``cfg.train.init_from``, and that checkpoint's weights."""
    path = Path(cfg.train.init_from)
    if not path.is_file():
        raise CheckpointError(f"train.init_from={path}: no such checkpoint")
    state = load_checkpoint(path, map_location="cpu")
    stored = to_config(state["config"])
    tokenizers = tokenizers_from_state(state)
    directory = Path(cfg.train.run_dir) / TOKENIZER_DIR
    if dist.is_main and not directory.is_dir():
        with atomic_dir(directory) as tmp:
            tokenizers.save(tmp)
    barrier(dist)
    run_model = cfg.model
    model = dataclasses.replace(stored.model, dropout=run_model.dropout, attention_dropout=run_model.attention_dropout,
                                activation_dropout=run_model.activation_dropout)
    data = dataclasses.replace(cfg.data, tokenizer=str(directory), joint_vocab=tokenizers.joint)
    logger.info("starting from %s: %s model, its tokenizers (%s)", path, stored.model.name, directory)
    return dataclasses.replace(cfg, model=model, data=data), state["model"]
