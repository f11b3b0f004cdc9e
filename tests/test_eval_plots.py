"""Plots: learning curves from metrics.jsonl and alignment heatmaps, written as PNG files."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from mt.eval.plots import plot_alignment, plot_learning_curves

PNG = b"\x89PNG\r\n\x1a\n"


def test_learning_curves(tmp_path: Path) -> None:
    rows = [{"split": "train", "step": s, "loss": 9.0 / s, "lr": 1e-4 * s, "ppl": 3.0} for s in range(1, 41)]
    rows += [{"split": "valid", "step": s, "loss": 8.0 / s, "bleu": 2.0 * s / 10} for s in (10, 20, 30, 40)]
    text = "\n".join(json.dumps(r) for r in rows) + '\n{"split": "train", "st'  # torn last line
    (tmp_path / "metrics.jsonl").write_text(text)
    with pytest.warns(UserWarning, match="not JSON"):
        paths = plot_learning_curves(tmp_path)
    assert [p.name for p in paths] == ["loss.png", "bleu.png", "lr.png"]
    assert all(p.parent == tmp_path and p.read_bytes().startswith(PNG) for p in paths)


def test_learning_curves_skip_missing_series(tmp_path: Path) -> None:
    (tmp_path / "metrics.jsonl").write_text(json.dumps({"split": "train", "step": 1, "loss": 5.0}) + "\n")
    assert [p.name for p in plot_learning_curves(tmp_path)] == ["loss.png"]


def test_alignment_png_and_shape_check(tmp_path: Path) -> None:
    weights = np.random.default_rng(0).dirichlet(np.ones(4), size=3)  # (T=3, S=4)
    path = plot_alignment(weights, ["▁ein", "▁Hund", ".", "</s>"], ["▁a", "▁dog", "</s>"], tmp_path / "a.png")
    assert path.read_bytes().startswith(PNG)
    with pytest.raises(ValueError, match="do not match"):
        plot_alignment(weights, ["x"], ["y"], tmp_path / "b.png")
