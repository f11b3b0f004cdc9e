"""What a finished training run leaves for the commands that use it: ``--exp NAME`` means ``runs/NAME``'s result.

A run of one model leaves ``<run_dir>/checkpoints/best.pt``. A run of ``train.members=N`` leaves
``<run_dir>/ensemble.json``: the checkpoint each member chose, relative to the run directory, which
``mt-translate``, ``mt-eval`` and ``mt-serve`` then decode as one ensemble. Where a run directory holds both
(one kind of run after the other), the newer file is the result. No torch here: a model that is not there is
reported before torch loads.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

from mt.errors import UserError

ENSEMBLE_RECORD = "ensemble.json"


def experiment_dir(name: str) -> Path:
    """Where ``--exp NAME`` looks for a run: ``runs/NAME`` (the presets' ``train.run_dir``)."""
    return Path("runs") / name


def best_checkpoint(run_dir: Path) -> Path:
    """The checkpoint a run of one model is used through."""
    return run_dir / "checkpoints" / "best.pt"


def write_ensemble_record(run_dir: Path, members: list[Path]) -> Path:
    """Record the members' chosen checkpoints in ``run_dir`` (a temporary file renamed over the record)."""
    record = run_dir / ENSEMBLE_RECORD
    names = [_relative_to(Path(member), run_dir) for member in members]
    partial = record.with_name(record.name + ".tmp")
    partial.write_text(json.dumps({"members": names}, indent=2) + "\n", encoding="utf-8")
    os.replace(partial, record)
    return record


def read_ensemble_record(record: Path) -> list[Path]:
    """The members' checkpoints an ensemble record names (module doc)."""
    try:
        members = json.loads(record.read_text(encoding="utf-8"))["members"]
        if not members or not all(isinstance(m, str) for m in members):
            raise ValueError("'members' must list checkpoint paths")
    except (OSError, ValueError, KeyError, TypeError) as e:
        raise UserError(f"{record}: not an ensemble record written by train.members ({e})") from None
    return [record.parent / member for member in members]


def experiment_checkpoints(run_dir: Path) -> list[Path]:
    """The checkpoint(s) of the run in ``run_dir``: the members of its ensemble record or its ``best.pt``,
    whichever was written last; ``[best.pt]`` when neither is there, for the caller to report."""
    best, record = best_checkpoint(run_dir), run_dir / ENSEMBLE_RECORD
    if record.is_file() and (not best.is_file() or record.stat().st_mtime >= best.stat().st_mtime):
        return read_ensemble_record(record)
    return [best]


def _relative_to(path: Path, run_dir: Path) -> str:
    """``path`` relative to ``run_dir`` where it lies inside it (the record survives a moved run), else absolute;
    symbolic links are kept as they are (a member may be a link to a checkpoint elsewhere)."""
    absolute = Path(os.path.abspath(path))
    try:
        return str(absolute.relative_to(os.path.abspath(run_dir)))
    except ValueError:
        return str(absolute)
