"""Figures for reports: cross-attention alignments and learning curves (PNG, headless).

Figures are drawn on ``matplotlib.figure.Figure`` with the Agg canvas directly: no pyplot, so no
global backend switch, no display needed, and nothing leaks between calls.
"""

from __future__ import annotations

import json
import warnings
from collections.abc import Sequence
from pathlib import Path

import numpy as np
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure


def _save(fig: Figure, path: Path) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    FigureCanvasAgg(fig)
    fig.savefig(path, dpi=120, bbox_inches="tight")
    return path


def plot_alignment(weights, src_pieces: Sequence[str], tgt_pieces: Sequence[str], path: str | Path) -> Path:
    """Heatmap of cross-attention ``weights`` (T, S): rows = target pieces, columns = source pieces."""
    matrix = np.asarray(weights, dtype=np.float32)
    if matrix.shape != (len(tgt_pieces), len(src_pieces)):
        raise ValueError(f"weights {matrix.shape} do not match {len(tgt_pieces)} x {len(src_pieces)} pieces")
    height, width = matrix.shape
    fig = Figure(figsize=(max(4.0, 0.35 * width + 2), max(3.0, 0.35 * height + 1.5)))
    ax = fig.add_subplot()
    image = ax.imshow(matrix, cmap="Greys", vmin=0.0, vmax=max(float(matrix.max()), 1e-6), aspect="auto")
    ax.set_xticks(range(width), list(src_pieces), rotation=90, fontsize=8)
    ax.set_yticks(range(height), list(tgt_pieces), fontsize=8)
    ax.set_xlabel("source")
    ax.set_ylabel("target (predicted piece)")
    fig.colorbar(image, ax=ax, fraction=0.04)
    return _save(fig, Path(path))


def read_metrics(path: Path) -> list[dict]:
    """Rows of a ``metrics.jsonl`` (a torn last line, as while training writes, is skipped)."""
    rows = []
    for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), start=1):
        if not line.strip():
            continue
        try:
            rows.append(json.loads(line))
        except json.JSONDecodeError:
            warnings.warn(f"{path}:{number}: not JSON, skipped", stacklevel=2)
    return rows


def _series(rows: list[dict], split: str, key: str) -> tuple[list[float], list[float]]:
    points = [(r["step"], r[key]) for r in rows if r.get("split") == split and isinstance(r.get(key), int | float)]
    return [p[0] for p in points], [p[1] for p in points]


def line_plot(
    path: Path,
    title: str,
    ylabel: str,
    lines: list[tuple[str, list[float], list[float]]],
    log_y: bool = False,
    x_label: str = "step (updates)",
    y_from_zero: bool = False,
) -> Path:
    """One PNG of labelled ``(label, xs, values)`` series (against updates unless ``x_label`` says otherwise).

    ``y_from_zero``: the y axis starts at 0, so heights compare as ratios (throughputs).
    """
    fig = Figure(figsize=(6.4, 4.0))
    ax = fig.add_subplot()
    if log_y:
        ax.set_yscale("log")
    for label, steps, values in lines:
        ax.plot(steps, values, marker="o" if len(steps) < 30 else None, markersize=3, label=label)
    ax.set_title(title)
    ax.set_xlabel(x_label)
    ax.set_ylabel(ylabel)
    if y_from_zero:
        ax.set_ylim(bottom=0)
    ax.grid(alpha=0.3)
    ax.legend()
    return _save(fig, path)


def plot_learning_curves(run_dir: str | Path) -> list[Path]:
    """PNGs from ``run_dir/metrics.jsonl``: loss.png (train/valid loss), bleu.png (valid BLEU), lr.png.

    A figure whose series are all empty is not written. Returns the written paths.
    """
    run_dir = Path(run_dir)
    rows = read_metrics(run_dir / "metrics.jsonl")
    figures = [
        ("loss.png", "Loss", "loss (label-smoothed, per token)", [("train", "loss"), ("valid", "loss")]),
        ("bleu.png", "Validation BLEU", "BLEU", [("valid", "bleu")]),
        ("lr.png", "Learning rate", "lr", [("train", "lr")]),
    ]
    written = []
    for name, title, ylabel, specs in figures:
        lines = [(split, *_series(rows, split, key)) for split, key in specs]
        lines = [line for line in lines if line[1]]
        if lines:
            written.append(line_plot(run_dir / name, title, ylabel, lines))
    return written
