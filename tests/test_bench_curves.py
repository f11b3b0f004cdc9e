"""scripts/bench_curves.py: the grid of points, reading bench_train's output, the table."""

import pytest
from helpers import load_script

BENCH_TRAIN_OUTPUT = """model transformer_small (9.3M params), 2 threads, max_tokens 4096, bf16, 2 x 8 timed updates
  warmup: 2 updates in 5.1 s (compilation included)
  run 1: 1,700 target tokens/s, 0.440 updates/s
  median target tokens/s : 1,715
  median updates/s       : 0.442
  peak RSS               : 3,093 MiB
"""


@pytest.fixture(scope="module")
def curves():
    return load_script("bench_curves")


def test_points_sweep_batches_at_the_most_threads_then_threads_at_4096(curves):
    assert curves.points([1024, 8192], [1, 2]) == [(1024, 2), (8192, 2), (4096, 1)]


def test_parse_bench_train_reads_the_medians_and_rss(curves):
    assert curves.parse_bench_train(BENCH_TRAIN_OUTPUT) == {"tokens_per_s": 1715.0, "updates_per_s": 0.442,
                                                            "peak_rss_mib": 3093.0}
    with pytest.raises(SystemExit, match="tokens_per_s"):
        curves.parse_bench_train("it crashed")


def test_table_pairs_fp32_and_bf16_of_a_point(curves):
    rows = [{"max_tokens": 4096, "threads": 2, "precision": p, "tokens_per_s": s, "updates_per_s": u, "peak_rss_mib": m}
            for p, s, u, m in (("fp32", 1000.0, 0.25, 2000.0), ("bf16", 1500.0, 0.375, 1900.0))]
    md = curves.table(rows)
    assert "| 4,096 | 2 | 1,000 | 1,500 | 1.50 | 0.250 | 0.375 | 2,000 | 1,900 |" in md


def test_plot_has_a_series_per_precision_and_thread_count(curves, tmp_path):
    rows = [{"max_tokens": m, "threads": t, "precision": p, "tokens_per_s": float(m * t), "updates_per_s": 1.0,
             "peak_rss_mib": 1.0} for m, t in ((2048, 2), (1024, 2), (4096, 1)) for p in ("fp32", "bf16")]
    assert curves.plot_series(rows) == [
        ("fp32, 2 threads", [1024, 2048], [2048.0, 4096.0]), ("bf16, 2 threads", [1024, 2048], [2048.0, 4096.0]),
        ("fp32, 1 thread", [4096], [4096.0]), ("bf16, 1 thread", [4096], [4096.0]),
    ]
    assert curves.plot(rows, "transformer_small", tmp_path).stat().st_size > 0
