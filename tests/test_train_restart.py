"""Warm restarts (``train.restart_from``): a run goes on from a checkpoint with its updates, clock and lr at 0."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest
import torch
from helpers import tiny_config

from mt.checkpoint import CheckpointError, load_checkpoint
from mt.config import ConfigError
from mt.train.loop import train
from mt.train.trainer import Trainer

RUN = ("train.save_every=2", "train.validate_every=100", "train.test_at_end=false", "train.average_last=0")


@pytest.fixture(scope="module")
def source(tmp_path_factory) -> Path:
    """The last checkpoint of a tiny run of 4 updates, shared by the tests that restart from it."""
    cfg = tiny_config(tmp_path_factory.mktemp("source"), "train.max_updates=4", *RUN)
    train(cfg)
    return Path(cfg.train.run_dir) / "checkpoints" / "last.pt"


def test_a_restart_goes_on_from_the_checkpoint_with_its_update_count_at_zero(
    source: Path, tmp_path: Path, capsys
) -> None:
    stored = load_checkpoint(source)
    cfg = tiny_config(tmp_path / "b", "train.max_updates=2", f"train.restart_from={source}", *RUN)
    trainer = Trainer(cfg)
    assert f"Restarted from {source} (its update 4)" in capsys.readouterr().out
    assert trainer.state.step == 0 and trainer.state.train_seconds == 0 and trainer.state.best_metric is None
    assert (trainer.state.epoch, trainer.state.batch_in_epoch) == (
        stored["train_state"]["epoch"], stored["train_state"]["batch_in_epoch"])  # the data goes on, not over
    for name, weight in trainer.model.state_dict().items():
        assert torch.equal(weight, stored["model"][name]), name
    moments = trainer.parts.optimizer.state_dict()["state"]
    assert all(torch.equal(moments[k]["exp_avg"], v["exp_avg"]) for k, v in stored["optimizer"]["state"].items())

    trainer.run(progress=False)
    assert load_checkpoint(Path(cfg.train.run_dir) / "checkpoints" / "last.pt")["train_state"]["step"] == 2


def test_a_restarted_run_resumes_from_its_own_checkpoints_after_a_stop(source: Path, tmp_path: Path, capsys) -> None:
    cfg = tiny_config(tmp_path / "b", "train.max_updates=2", f"train.restart_from={source}", *RUN)
    train(cfg)
    capsys.readouterr()
    longer = dataclasses.replace(cfg, train=dataclasses.replace(cfg.train, max_updates=4))
    trainer = Trainer(longer)  # the command again, with more updates: its own last.pt, not the restart
    out = capsys.readouterr().out
    assert "Resumed from" in out and "Restarted from" not in out and trainer.state.step == 2


def test_a_restart_from_a_missing_or_foreign_checkpoint_is_refused_by_name(source: Path, tmp_path: Path) -> None:
    missing = tmp_path / "nowhere.pt"
    with pytest.raises(CheckpointError, match=f"checkpoint not found: {missing}"):
        Trainer(tiny_config(tmp_path / "b", f"train.restart_from={missing}", *RUN))
    with pytest.raises(CheckpointError, match="d_model"):
        Trainer(tiny_config(tmp_path / "c", f"train.restart_from={source}", "model.d_model=48", *RUN))


def test_a_restart_of_several_members_is_refused_by_name(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="train.restart_from.*every member would go on from that checkpoint"):
        tiny_config(tmp_path, "train.restart_from=a.pt", "train.members=2")
