"""scripts/bench_peers.py: the parsing of fairseq's log and of /proc (no training, no fairseq needed)."""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest
from helpers import load_script


@pytest.fixture(scope="module")
def bench():
    try:
        yield load_script("bench_peers")
    finally:
        del sys.modules["bench_peers"]


def inner(n: int, wps: str, ups: str, wpb: str = "3412.1", bsz: str = "236.4") -> str:
    return (f"2026-12-01 10:00:{n % 60:02d} | INFO | train_inner | epoch 001:     {n} / 150 loss=12.9, "
            f"nll_loss=12.8, ppl=7126.5, wps={wps}, ups={ups}, wpb={wpb}, bsz={bsz}, num_updates={n}, "
            f"lr=1.4e-05, gnorm=3.21, train_wall=56, gb_free=None, wall=58")


LOG = "\n".join([
    "== 2026-12-01T09:00:00Z train bench-peers-small: --max-update 60 save_dir=/x OMP_NUM_THREADS=2",
    inner(20, "999", "0.3"),
    inner(40, "999", "0.3"),
    "== 2026-12-01T09:05:00Z done bench-peers-small",
    "== 2026-12-01T10:00:00Z train bench-peers-small: --max-update 80 save_dir=/x OMP_NUM_THREADS=2",
    "2026-12-01 10:00:01 | INFO | fairseq_cli.train | task: TranslationTask",
    inner(20, "5000", "2"),
    inner(40, "1189.5", "0.35"),
    inner(60, "1.23457e+06", "361.5", wpb="3300", bsz="220"),
    "2026-12-01 10:01:00 | INFO | train | epoch 001 | loss 12.1 | wps 1200.5 | ups 0.36 | num_updates 60",
    inner(80, "1250", "0.37"),
    "== 2026-12-01T10:05:00Z done bench-peers-small",
])


def test_log_values_reads_both_line_styles(bench):
    values = bench.log_values(inner(40, "1189.5", "0.35"))
    assert values["wps"] == 1189.5 and values["ups"] == 0.35 and values["num_updates"] == 40
    assert values["lr"] == pytest.approx(1.4e-05) and "gb_free" not in values
    summary = bench.log_values("| train | epoch 001 | loss 12.1 | wps 1200.5 | ups 0.36 | num_updates 60")
    assert summary == {"epoch": 1.0, "loss": 12.1, "wps": 1200.5, "ups": 0.36, "num_updates": 60.0}


def test_fairseq_intervals_last_run_after_warmup(bench):
    intervals = bench.fairseq_intervals(LOG, skip_updates=20)
    assert [d["num_updates"] for d in intervals] == [40, 60, 80]  # the epoch summary line is not an interval
    assert [d["wps"] for d in intervals] == [1189.5, 1.23457e06, 1250.0]
    assert intervals[1]["wpb"] == 3300 and intervals[1]["bsz"] == 220
    assert bench.median_of(intervals, "wps") == 1250.0
    assert bench.median_of(intervals, "ups") == 0.37


def test_fairseq_intervals_without_run_markers_reads_everything(bench):
    plain = "\n".join(line for line in LOG.splitlines() if not line.startswith("== "))
    assert [d["num_updates"] for d in bench.fairseq_intervals(plain, skip_updates=0)] == [20, 40, 20, 40, 60, 80]


def test_proc_cpu_ticks_survives_odd_process_names(bench):
    fields = ["R"] + [str(k) for k in range(4, 53)]  # fields 3..52; utime (14) = "14", stime (15) = "15"
    assert bench.proc_cpu_ticks(f"1234 (py thon) x) {' '.join(fields)}") == 14 + 15


def test_proc_cpu_ticks_of_this_process_grows(bench):
    stat = Path(f"/proc/{os.getpid()}/stat")  # Linux, as the harness itself
    before = bench.proc_cpu_ticks(stat.read_text())
    x = 0
    for i in range(3_000_000):
        x += i * i
    assert bench.proc_cpu_ticks(stat.read_text()) > before


def test_exact_ups_is_wps_over_wpb(bench):
    interval = bench.exact_ups({"wps": 1189.5, "ups": 0.35, "wpb": 3412.1, "bsz": 236.4, "num_updates": 40})
    assert interval["ups"] == pytest.approx(1189.5 / 3412.1) and interval["ups_logged"] == 0.35
    figures = bench.run_figures([interval, bench.exact_ups({"wps": 1000, "ups": 0.3, "wpb": 3000, "bsz": 200})])
    assert figures["tokens_per_s"] == pytest.approx((1189.5 + 1000) / 2)
    assert figures["sentences_per_s"] == pytest.approx((236.4 * 1189.5 / 3412.1 + 200 / 3) / 2)


def test_ratio_lines_name_the_first_mt_system_plainly_and_the_others_in_parentheses(bench):
    lines = bench.ratio_lines({"transformer_small": {"mt bf16": 1.534, "mt fp32": 1.1},
                               "transformer_mini": {"mt bf16": 1.6, "mt fp32": 1.25}})
    assert lines == ["ratio transformer_small: 1.53  (mt bf16 / fairseq)", "ratio transformer_small (mt fp32): 1.10",
                     "ratio transformer_mini: 1.60  (mt bf16 / fairseq)", "ratio transformer_mini (mt fp32): 1.25"]
