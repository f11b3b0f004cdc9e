"""scripts/bf16_parity.py: the runs compose into the preset with only precision and seed differing; the table."""

import argparse

import pytest
from helpers import load_script

from mt.config import compose


@pytest.fixture(scope="module")
def parity():
    return load_script("bf16_parity")


def _args():
    return argparse.Namespace(data_dir="/data/m30k", updates=800, validate_every=200)


def test_runs_differ_only_in_precision_and_seed(parity, tmp_path):
    a = compose(parity.train_overrides(_args(), tmp_path / "a", "fp32", 1))
    b = compose(parity.train_overrides(_args(), tmp_path / "a", "bf16", 2))
    preset = compose(["experiment=multi30k_en_de"])
    assert (a.train.precision, b.train.precision) == ("fp32", "bf16") and (a.train.seed, b.train.seed) == (1, 2)
    assert a.model == b.model == preset.model and a.optim == b.optim == preset.optim
    assert a.data.max_tokens == preset.data.max_tokens and a.train.max_updates == 800
    assert a.train.validate_every == 200 and not a.train.valid_bleu and a.train.max_time_minutes == 0
    assert a.train.members == b.train.members == 1  # one model per run, whatever the preset trains


def test_table_reports_per_seed_differences_and_speeds(parity):
    curves = {("fp32", 1): {200: 40.0, 400: 20.0}, ("bf16", 1): {200: 40.4, 400: 19.8},
              ("fp32", 2): {200: 42.0, 400: 21.0}, ("bf16", 2): {200: 41.0, 400: 21.21}}
    speeds = {("fp32", 1): 1000.0, ("bf16", 1): 1250.0, ("fp32", 2): 1100.0, ("bf16", 2): 1320.0}
    md = parity.table(curves, speeds, [1, 2])
    assert "| 1 | 400 | 20.000 | 19.800 | -1.00% |" in md
    assert "| 2 | 400 | 21.000 | 21.210 | +1.00% |" in md
    assert "| mean | 400 | 20.500 | 20.505 | +0.02% |" in md
    assert "| 1 | 1,000 | 1,250 | 1.25 |" in md and "| 2 | 1,100 | 1,320 | 1.20 |" in md


def test_tokens_per_s_skips_the_first_interval_and_weights_by_tokens(parity):
    rows = [{"split": "train", "step": 20, "tokens_per_s": 10.0, "ntokens": 100},
            {"split": "train", "step": 40, "tokens_per_s": 1000.0, "ntokens": 1000},
            {"split": "train", "step": 60, "tokens_per_s": 500.0, "ntokens": 1000},
            {"split": "valid", "step": 60, "ppl": 9.0}]
    assert parity.tokens_per_s(rows) == pytest.approx(2000 / 3.0)
    assert parity.finished(rows, 60) and not parity.finished(rows, 80)
