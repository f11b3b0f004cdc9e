"""``mt.runs``: which checkpoint(s) ``--exp NAME`` means after a run of one model or of ``train.members``."""

import json
import os
from pathlib import Path

import pytest

from mt.errors import UserError
from mt.runs import best_checkpoint, experiment_checkpoints, read_ensemble_record, write_ensemble_record


def _touch(path: Path, mtime: float) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(b"")
    os.utime(path, (mtime, mtime))
    return path


def test_a_run_of_one_model_is_its_best_checkpoint(tmp_path: Path) -> None:
    best = _touch(best_checkpoint(tmp_path), 1000.0)
    assert experiment_checkpoints(tmp_path) == [best]


def test_without_a_result_the_best_checkpoint_is_named_for_the_error(tmp_path: Path) -> None:
    assert experiment_checkpoints(tmp_path / "never") == [tmp_path / "never" / "checkpoints" / "best.pt"]


def test_an_ensemble_record_names_the_members_relative_to_the_run(tmp_path: Path) -> None:
    run = tmp_path / "runs" / "x"
    chosen = [run / "member_1" / "checkpoints" / "averaged.pt", run / "member_2" / "checkpoints" / "best.pt"]
    run.mkdir(parents=True)
    record = write_ensemble_record(run, chosen)
    assert json.loads(record.read_text())["members"] == [
        "member_1/checkpoints/averaged.pt", "member_2/checkpoints/best.pt"
    ]
    assert experiment_checkpoints(run) == chosen
    moved = tmp_path / "moved"
    run.rename(moved)  # the record still names the members of the moved run
    assert experiment_checkpoints(moved) == [moved / "member_1/checkpoints/averaged.pt",
                                             moved / "member_2/checkpoints/best.pt"]


def test_a_member_outside_the_run_is_recorded_by_its_absolute_path(tmp_path: Path) -> None:
    (tmp_path / "run").mkdir()
    elsewhere = tmp_path / "other" / "model.pt"
    write_ensemble_record(tmp_path / "run", [elsewhere])
    assert experiment_checkpoints(tmp_path / "run") == [elsewhere.absolute()]


@pytest.mark.parametrize("ensemble_newer", [True, False])
def test_the_newer_of_best_and_the_record_is_the_result(tmp_path: Path, ensemble_newer: bool) -> None:
    best = _touch(best_checkpoint(tmp_path), 1000.0)
    record = write_ensemble_record(tmp_path, [tmp_path / "member_1" / "a.pt"])
    os.utime(record, (2000.0, 2000.0) if ensemble_newer else (500.0, 500.0))
    expected = [tmp_path / "member_1" / "a.pt"] if ensemble_newer else [best]
    assert experiment_checkpoints(tmp_path) == expected


@pytest.mark.parametrize("text", ["{not json", '{"members": []}', '{"members": [1]}', '["a.pt"]', "{}"])
def test_a_damaged_record_is_named_in_a_one_line_error(tmp_path: Path, text: str) -> None:
    record = tmp_path / "ensemble.json"
    record.write_text(text)
    with pytest.raises(UserError, match=r"ensemble\.json: not an ensemble record written by train\.members"):
        read_ensemble_record(record)
