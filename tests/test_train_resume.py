"""Resume refuses another model's run directory; best tracking by BLEU or loss."""

import math

import pytest
from helpers import tiny_config

from mt.checkpoint import CheckpointError
from mt.errors import UserError
from mt.train.checkpointing import record_validation
from mt.train.state import TrainState
from mt.train.trainer import Trainer


def _snapshot(directory):
    return {p.name: p.read_bytes() for p in sorted(directory.iterdir())}


def test_resuming_into_a_run_dir_of_another_model_or_vocabulary_fails_and_leaves_it(tmp_path):
    trainer = Trainer(tiny_config(tmp_path, "train.max_updates=2", "train.validate_every=1000"))
    assert trainer.run() == "max_updates"
    run, ckpts = tmp_path / "run", tmp_path / "run" / "checkpoints"
    before, run_files = _snapshot(ckpts), sorted(p.name for p in run.iterdir())

    with pytest.raises(CheckpointError) as error:
        Trainer(tiny_config(tmp_path, "model.d_model=64", "model.heads=8"))
    assert isinstance(error.value, UserError)
    assert str(error.value) == (
        f"run dir {run} holds a checkpoint of another model (model.d_model 32 vs 64, model.heads 4 vs 8; "
        "last.pt vs this config): use a new train.run_dir or the same settings"
    )
    with pytest.raises(CheckpointError, match=r"another model \(data\.vocab_size 120 vs 96; last\.pt"):
        Trainer(tiny_config(tmp_path, "data.vocab_size=96"))
    assert _snapshot(ckpts) == before and sorted(p.name for p in run.iterdir()) == run_files

    # dropout changes neither the weights' shapes nor their meaning: the run resumes
    resumed = Trainer(tiny_config(tmp_path, "model.dropout=0.3"))
    assert resumed.resumed_from == ckpts / "last.pt" and resumed.state.step == 2


def test_best_is_the_highest_bleu_or_the_lowest_loss():
    state = TrainState(step=1)
    assert record_validation(state, {"loss": 3.0, "bleu": 10.0}, "bleu")
    state.step = 2
    assert not record_validation(state, {"loss": 2.0, "bleu": 9.0}, "bleu")  # lower loss, but BLEU is tracked
    assert (state.best_metric, state.best_step, state.bad_validations, state.best_metric_name) == (10.0, 1, 1, "bleu")
    state.step = 3
    assert record_validation(state, {"loss": 2.5, "bleu": 12.0}, "bleu") and state.bad_validations == 0

    by_loss = TrainState(step=1)
    assert record_validation(by_loss, {"loss": 3.0}, "bleu")  # no BLEU computed: the loss is tracked
    assert by_loss.best_metric_name == "loss"
    by_loss.step = 2
    assert record_validation(by_loss, {"loss": 2.0}, "loss") and by_loss.best_step == 2
    assert not record_validation(by_loss, {"loss": 2.5}, "loss") and by_loss.bad_validations == 1
    assert not record_validation(by_loss, {"loss": math.nan}, "loss")  # a non-finite score never counts
    assert by_loss.bad_validations == 1 and by_loss.best_metric == 2.0
