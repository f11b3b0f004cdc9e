"""The training progress bar follows whichever limit binds first (regression: under a time budget it
counted toward max_updates, so a 55-minute run showed an ETA of 13 hours)."""

from __future__ import annotations

from mt.config import TrainConfig
from mt.train.progress import Progress, projected_updates
from mt.train.schedule import budget_progress


def test_a_time_budget_projects_the_updates_it_holds_at_the_pace_so_far():
    cfg = TrainConfig(max_updates=100_000, max_time_minutes=10)
    spent = budget_progress(300, 150.0, cfg)  # 300 updates in a quarter of the 10 minutes
    assert projected_updates(300, spent, cfg.max_updates) == 1200


def test_max_updates_bounds_the_projection_and_the_bar_never_ends_before_its_updates():
    cfg = TrainConfig(max_updates=1000, max_time_minutes=60)
    assert projected_updates(500, budget_progress(500, 60.0, cfg), 1000) == 1000  # updates bind first
    assert projected_updates(0, 0.0, 1000) == 1000  # nothing spent yet: max_updates
    assert projected_updates(700, 1.0, 1000) == 700  # the budget is spent: the bar is full


def test_the_bar_total_follows_the_projection():
    bar = Progress(total=100_000)
    bar.update(300, loss=3.0, lr=1e-3, tok_s=8000.0, spent=0.25)
    assert (bar._bar.n, bar._bar.total) == (300, 1200)
    bar.update(600, loss=3.0, lr=1e-3, tok_s=8000.0, spent=0.48)
    assert bar._bar.total == 1250
    bar.close()
