"""scripts/ablate.py: every row composes into the intended model, and the throughput/table helpers."""

import argparse

import pytest
from helpers import load_script

from mt.config import compose


@pytest.fixture(scope="module")
def ablate():
    return load_script("ablate")


def _args(**kw):
    base = dict(data_dir="/data/m30k", minutes=10.0, seed=1, warmup=400, validate_every=100)
    return argparse.Namespace(**{**base, **kw})


def test_every_row_composes_with_the_shared_recipe(ablate, tmp_path):
    seen = set()
    for name, (_, options) in ablate.ROWS.items():
        cfg = compose(ablate.train_overrides(_args(), tmp_path / name, options))
        m = cfg.model
        assert (cfg.model.name, cfg.data.max_tokens, cfg.train.max_time_minutes) == ("transformer_mini", 4096, 10.0)
        assert (cfg.optim.warmup_updates, cfg.train.seed, cfg.train.validate_every) == (400, 1, 100)
        assert cfg.train.run_dir == str(tmp_path / name)
        seen.add((m.pre_ln, m.norm, m.activation, m.positions, m.qk_norm, m.kv_heads))
    assert len(seen) == len(ablate.ROWS)  # no two rows train the same model
    paper = compose(ablate.train_overrides(_args(), tmp_path / "p", ablate.ROWS["postln"][1])).model
    assert (paper.pre_ln, paper.norm, paper.activation, paper.positions, paper.kv_heads) == (
        False, "layernorm", "relu", "sinusoidal", 0)
    modern = compose(ablate.train_overrides(_args(), tmp_path / "m", ablate.ROWS["modern"][1])).model
    assert (modern.pre_ln, modern.norm, modern.activation, modern.positions, modern.qk_norm, modern.kv_heads) == (
        True, "rmsnorm", "swiglu", "rope", True, 2)


def test_train_throughput_weights_intervals_by_their_tokens(ablate):
    rows = [
        {"split": "train", "step": 20, "ntokens": 1000, "tokens_per_s": 1000.0},  # 1 s
        {"split": "train", "step": 40, "ntokens": 3000, "tokens_per_s": 1000.0},  # 3 s
        {"split": "valid", "step": 40, "ppl": 9.0},
        {"split": "train", "step": 60, "ntokens": 4000, "tokens_per_s": 4000.0},  # 1 s
        {"split": "valid", "step": 61, "ppl": 8.0},
    ]
    updates, tokens_per_s = ablate.train_throughput(rows)
    assert updates == 61
    assert tokens_per_s == pytest.approx(8000 / 5)


def test_table_has_a_line_per_row(ablate):
    r = dict(label="Pre-LN", parameters=1234567, train_tokens_per_s=4321, updates=600, valid_ppl=12.345,
             valid_bleu_greedy=20.5, test_bleu=21.25, test_chrf=50.04, decode_sentences_per_s=180.4,
             kv_bytes_per_token=4096)
    lines = ablate.table([r, {**r, "label": "RMS"}], 500, [14.0, 13.5]).splitlines()
    assert len(lines) == 4
    assert "valid ppl @ 500 upd." in lines[0]
    assert lines[2] == "| Pre-LN | 1,234,567 | 4,321 | 600 | 12.35 | 14.00 | 20.50 | 21.25 | 50.0 | 180 | 4,096 |"
    assert lines[3].startswith("| RMS |") and "| 13.50 |" in lines[3]


def test_common_step_is_the_last_validation_every_row_reached(ablate):
    rows = {name: [{"split": "valid", "step": s, "ppl": 1000.0 / s} for s in steps] + [{"split": "train", "step": 1}]
            for name, steps in (("a", (100, 200, 300, 333)), ("b", (100, 200, 250)))}
    step, ppls = ablate.valid_ppl_at_common_step([ablate.valid_curve(r) for r in rows.values()])
    assert step == 200
    assert ppls == [5.0, 5.0]
