"""One version: pyproject's, printed by every entry point, written into checkpoints and reports, checked on load."""

from __future__ import annotations

import subprocess
import sys
import tomllib
from pathlib import Path

import pytest
import torch
from export_helpers import untrained_checkpoint

from mt import __version__
from mt.checkpoint import CheckpointError, load_checkpoint, load_for_inference, save_checkpoint, version_tuple

REPO = Path(__file__).resolve().parents[1]


def test_the_package_version_is_pyprojects():
    project = tomllib.loads((REPO / "pyproject.toml").read_text(encoding="utf-8"))["project"]
    assert __version__ == project["version"]
    assert version_tuple(__version__) >= (0, 3, 0)


def _entry_point_mains():
    from mt.cli import evaluate, export, plots, serve, translate

    return {"mt-translate": translate.main, "mt-eval": evaluate.main, "mt-export": export.main, "mt-plots": plots.main,
            "mt-serve": serve.main}


@pytest.mark.parametrize("prog", ["mt-translate", "mt-eval", "mt-export", "mt-plots", "mt-serve"])
def test_argparse_entry_points_print_the_version(prog, capsys):
    with pytest.raises(SystemExit) as stop:
        _entry_point_mains()[prog](["--version"])
    assert stop.value.code == 0
    assert capsys.readouterr().out.strip() == f"{prog} {__version__}"


def test_mt_train_prints_the_version_without_composing_a_config(tmp_path):
    out = subprocess.run(
        [sys.executable, "-m", "mt.train", "--version", "train.validate_every=0"],  # an invalid value: never read
        capture_output=True, text=True, cwd=tmp_path, env={"PYTHONPATH": str(REPO), "PATH": "/usr/bin:/bin"},
    )
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == f"mt-train {__version__}"
    assert not any(tmp_path.iterdir())  # no run directory, no Hydra output


@pytest.mark.parametrize(
    ("text", "parsed"), [("0.3.0", (0, 3, 0)), ("0.4.0rc1", (0, 4, 0)), ("1.0", (1, 0)), ("2.10.1.dev3", (2, 10, 1))]
)
def test_version_tuple(text, parsed):
    assert version_tuple(text) == parsed
    assert version_tuple("0.10.0") > version_tuple("0.9.9")


def test_a_saved_checkpoint_records_the_version(tmp_path):
    path = save_checkpoint(tmp_path / "c.pt", {"model": {}, "config": {}})
    assert torch.load(path, weights_only=True)["mt_version"] == __version__


def _restamped(path: Path, version: str | None) -> Path:
    """``path`` rewritten as if mt ``version`` had saved it (None: no version, as before 0.3.0)."""
    state = torch.load(path, weights_only=True)
    state.pop("mt_version")
    if version is not None:
        state["mt_version"] = version
    torch.save(state, path)  # not save_checkpoint: that would stamp today's version
    return path


@pytest.mark.parametrize("version", [None, "0.1.0", __version__])
def test_a_checkpoint_of_this_or_an_older_version_loads(tmp_path, version):
    ckpt = _restamped(untrained_checkpoint(tmp_path / "model.pt"), version)
    model, tokenizers, cfg = load_for_inference(ckpt)
    assert cfg.model.d_model > 0 and not model.training and tokenizers.src.vocab_size == 100


def test_a_checkpoint_of_a_newer_version_is_refused_naming_both_versions(tmp_path):
    ckpt = _restamped(untrained_checkpoint(tmp_path / "new" / "model.pt"), "9.1.0")
    with pytest.raises(CheckpointError) as error:
        load_checkpoint(ckpt)
    message = str(error.value)
    assert "9.1.0" in message and __version__ in message and str(ckpt) in message


def test_mt_translate_refuses_a_newer_checkpoint_in_one_line(tmp_path):
    ckpt = _restamped(untrained_checkpoint(tmp_path / "new" / "model.pt"), "9.1.0")
    out = subprocess.run(
        [sys.executable, "-m", "mt.cli.translate", "--ckpt", str(ckpt)], input="one\n",
        capture_output=True, text=True, env={"PYTHONPATH": str(REPO), "PATH": "/usr/bin:/bin"},
    )
    assert out.returncode == 1
    assert out.stderr.strip().splitlines() == [
        f"mt-translate: error: {ckpt} was written by mt 9.1.0, newer than this mt {__version__}: upgrade mt to read it"
    ]
