"""Evaluation: sacreBLEU metrics, reports (JSON + Markdown) and plots."""

from mt.eval.metrics import score
from mt.eval.plots import plot_alignment, plot_learning_curves

__all__ = ["plot_alignment", "plot_learning_curves", "score"]
