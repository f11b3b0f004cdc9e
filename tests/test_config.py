"""Every config composes against its dataclass; unknown keys and bad values fail at compose time."""

from dataclasses import dataclass, replace
from pathlib import Path

import pytest
from helpers import CONF_DIR, compose_config
from hydra.errors import ConfigCompositionException
from omegaconf.errors import ConfigKeyError

from mt.config import Config, ConfigError, to_config, to_dict, validate_group
from mt.config_rules import Rule
from mt.errors import UserError

EXPERIMENTS = sorted(p.stem for p in (Path(CONF_DIR) / "experiment").glob("*.yaml"))
GROUPS = {g: sorted(p.stem for p in (Path(CONF_DIR) / g).glob("*.yaml")) for g in ("data", "model", "decode")}


@pytest.mark.parametrize("experiment", EXPERIMENTS)
def test_every_experiment_composes(experiment):
    required = ["train.init_from=model.pt"] if experiment == "finetune" else []  # the preset asks for it
    cfg = compose_config([f"experiment={experiment}", *required])
    assert isinstance(cfg, Config) and cfg.name == experiment
    assert cfg.train.run_dir == f"runs/{experiment}"


@pytest.mark.parametrize(("group", "option"), [(g, o) for g, opts in GROUPS.items() for o in opts])
def test_every_group_option_composes(group, option):
    cfg = compose_config([f"{group}={option}"])
    assert isinstance(cfg, Config)


def test_default_is_the_demo_with_paper_optimizer():
    cfg = compose_config([])
    assert cfg.name == "demo" and cfg.data.source == "demo"
    assert tuple(cfg.optim.betas) == (0.9, 0.98) and cfg.optim.eps == 1e-9 and cfg.optim.label_smoothing == 0.1
    assert cfg.decode.beam_size == 4 and cfg.decode.alpha == 0.6 and cfg.decode.max_len_b == 50


def test_paper_model_sizes():
    base = compose_config(["model=transformer_base"]).model
    big = compose_config(["model=transformer_big"]).model
    assert (base.d_model, base.d_ff, base.heads, base.dropout, base.encoder_layers) == (512, 2048, 8, 0.1, 6)
    assert (big.d_model, big.d_ff, big.heads, big.dropout) == (1024, 4096, 16, 0.3)
    assert base.pre_ln is False and base.share_all_embeddings is True


def test_unknown_key_fails_at_compose_time():
    with pytest.raises((ConfigCompositionException, ConfigKeyError)):
        compose_config(["model.nonexistent_knob=3"])
    with pytest.raises(ConfigCompositionException):
        compose_config(["train.max_updates=lots"])


# (overrides, the one message line expected: key=value and what is allowed)
BAD_VALUES = [
    (["train.validate_every=0"], "train.validate_every=0: must be > 0 (validate every N updates)"),
    (["train.save_every=-5"], "train.save_every=-5: must be > 0"),
    (["train.keep_last=3", "train.average_last=4"], "train.average_last=4: must be <= train.keep_last=3"),
    (["train.update_freq=0"], "train.update_freq=0: must be >= 1"),
    (["train.log_every=0"], "train.log_every=0: must be >= 1"),
    (["train.precision=fp8"], "train.precision=fp8: must be one of fp32 | bf16 | fp16"),
    (["train.device=gpu"], "train.device=gpu: must be one of auto | cpu | cuda | cuda:N"),
    (["train.device=cuda:x"], "train.device=cuda:x: must be one of"),
    (["train.best_metric=chrf"], "train.best_metric=chrf: must be one of bleu | loss"),
    (["train.max_updates=0"], "train.max_updates=0: must be > 0"),
    (["train.valid_beam_size=0"], "train.valid_beam_size=0: must be >= 1"),
    (["train.ema_decay=1.0"], "train.ema_decay=1.0: must be in [0, 1) (0 = off"),
    (["train.ema_decay=-0.5"], "train.ema_decay=-0.5: must be in [0, 1) (0 = off"),
    (["model.d_model=32", "model.heads=3"], "model.heads=3: must divide model.d_model=32"),
    (["model.heads=0"], "model.heads=0: must be > 0"),
    (["model.dropout=1.0"], "model.dropout=1.0: must be in [0, 1)"),
    (["model.attention_dropout=-0.1"], "model.attention_dropout=-0.1: must be in [0, 1)"),
    (["model.activation_dropout=1.5"], "model.activation_dropout=1.5: must be in [0, 1)"),
    (["model.encoder_layers=0"], "model.encoder_layers=0: must be > 0"),
    (["model.decoder_layers=-1"], "model.decoder_layers=-1: must be > 0"),
    (["model.d_model=0"], "model.d_model=0: must be > 0"),
    (["model.d_ff=0"], "model.d_ff=0: must be > 0"),
    (["model.max_positions=0"], "model.max_positions=0: must be > 0"),
    (["model.activation=swish"], "model.activation=swish: must be one of relu | gelu"),
    (["decode.beam_size=0", "decode.nbest=1"], "decode.beam_size=0: must be >= 1"),
    (["decode.beam_size=4", "decode.nbest=5"], "decode.nbest=5: must be in [1, decode.beam_size=4]"),
    (["decode.nbest=0"], "decode.nbest=0: must be in [1, decode.beam_size=4]"),
    (["decode.top_p=0"], "decode.top_p=0.0: must be in (0, 1]"),
    (["decode.top_p=1.5"], "decode.top_p=1.5: must be in (0, 1]"),
    (["decode.temperature=0"], "decode.temperature=0.0: must be > 0"),
    (["decode.top_k=-1"], "decode.top_k=-1: must be >= 0"),
    (["decode.max_tokens=0"], "decode.max_tokens=0: must be > 0"),
    (["decode.max_sentences=0"], "decode.max_sentences=0: must be > 0"),
    (["decode.strategy=nucleus"], "decode.strategy=nucleus: must be one of beam | greedy | sample"),
    (["decode.length_penalty=wu"], "decode.length_penalty=wu: must be one of gnmt | length | none"),
    (["decode.on_too_long=split"], "decode.on_too_long=split: must be one of truncate | reject"),
    (["data.max_tokens=0"], "data.max_tokens=0: must be > 0"),
    (["data.vocab_size=0"], "data.vocab_size=0: must be > 0"),
    (["data.pad_to_multiple=0"], "data.pad_to_multiple=0: must be >= 1"),
    (["data.character_coverage=0"], "data.character_coverage=0.0: must be in (0, 1]"),
    (["data.character_coverage=1.01"], "data.character_coverage=1.01: must be in (0, 1]"),
    (["data.source=s3"], "data.source=s3: must be one of demo | files | hub"),
    (["data.format=csv"], "data.format=csv: must be one of parallel | tsv | jsonl"),
    (["data.max_len_ratio=0.5"], "data.max_len_ratio=0.5: must be >= 1"),
    (["optim.warmup_updates=-1"], "optim.warmup_updates=-1: must be >= 1"),
    (["optim.lr=0"], "optim.lr=0.0: must be > 0"),
    (["optim.label_smoothing=1.0"], "optim.label_smoothing=1.0: must be in [0, 1)"),
    (["optim.betas=[0.9,1.0]"], "optim.betas=[0.9,1.0]: must be two values in [0, 1)"),
    (["optim.betas=[-0.1,0.98]"], "optim.betas=[-0.1,0.98]: must be two values in [0, 1)"),
    (["optim.schedule=cosine"], "optim.schedule=cosine: must be one of noam | inverse_sqrt"),
    (["optim.budget_decay=step"], "optim.budget_decay=step: must be one of none | linear | cosine"),
    (["optim.rdrop_alpha=-1"], "optim.rdrop_alpha=-1.0: must be >= 0 (0 = off)"),
]


@pytest.mark.parametrize(("overrides", "message"), BAD_VALUES, ids=[" ".join(o) for o, _ in BAD_VALUES])
def test_bad_value_fails_at_compose_time_naming_the_key(overrides, message):
    with pytest.raises(ConfigError) as err:
        compose_config(overrides)
    assert isinstance(err.value, UserError)
    assert any(line.strip().startswith(message) for line in str(err.value).splitlines()), str(err.value)


def test_every_broken_rule_is_reported_at_once():
    with pytest.raises(ConfigError) as err:
        compose_config(["train.validate_every=0", "decode.top_p=2", "model.dropout=1"])
    assert [p.split("=")[0] for p in err.value.problems] == ["model.dropout", "train.validate_every", "decode.top_p"]
    assert str(err.value).splitlines() == ["3 config values are invalid:", *(f"  {p}" for p in err.value.problems)]


def test_good_edge_values_compose():
    cfg = compose_config(["train.device=cuda:1", "decode.top_p=1", "decode.top_k=0", "data.character_coverage=1",
                          "model.dropout=0", "train.keep_last=0", "train.average_last=7", "optim.warmup_updates=1",
                          "decode=greedy", "data.pad_to_multiple=1"])
    assert cfg.train.device == "cuda:1" and cfg.decode.beam_size == 1


def test_to_config_validates_a_stored_dict_and_validate_group_checks_one_group():
    stored = to_dict(compose_config([]))
    stored["train"]["validate_every"] = 0
    with pytest.raises(ConfigError, match=r"^train\.validate_every=0: must be > 0"):
        to_config(stored)
    decode = replace(compose_config([]).decode, beam_size=2, nbest=3)
    with pytest.raises(ConfigError, match=r"^decode\.nbest=3: must be in \[1, decode\.beam_size=2\]$"):
        validate_group("decode", decode)
    assert validate_group("decode", replace(decode, nbest=2)).nbest == 2


def test_a_rule_for_a_field_the_group_lacks_is_skipped():
    @dataclass
    class OldDecode:  # e.g. a DecodeConfig before decode.min_len existed
        beam_size: int = 0

    assert Rule("min_len", lambda v, g: False, "never").problem("decode", OldDecode()) is None
    rule = Rule("beam_size", lambda v, g: v >= 1, "must be >= 1")
    assert rule.problem("decode", OldDecode()) == "decode.beam_size=0: must be >= 1"


def test_multi30k_paper_preset_is_the_preset_with_the_papers_model_and_decoding():
    from mt.config import compose

    paper, preset = compose(["experiment=multi30k_en_de_paper"]), compose(["experiment=multi30k_en_de"])
    assert (paper.model.pre_ln, paper.model.positions) == (False, "sinusoidal")
    assert (paper.decode.stopping, paper.decode.alpha) == ("topk_eos", 0.6)
    assert paper.model.d_model == preset.model.d_model and paper.optim == preset.optim and paper.data == preset.data
    assert replace(paper.train, run_dir="", members=2) == replace(preset.train, run_dir="")
    assert paper.name == "multi30k_en_de_paper" and paper.train.run_dir.endswith("multi30k_en_de_paper")


def test_the_papers_model_is_one_4_plus_4_mini_and_model_overrides_keep_their_own_depth():
    # regression: the preset's 6+6 depth and its two members once leaked into the paper's preset, so the
    # benchmarks that train it (and fairseq's 4+4 counterpart in bench_peers) compared other models
    from mt.config import compose

    paper, preset = compose(["experiment=multi30k_en_de_paper"]), compose(["experiment=multi30k_en_de"])
    assert (paper.model.name, paper.model.encoder_layers, paper.model.decoder_layers) == ("transformer_mini", 4, 4)
    assert paper.train.members == 1
    assert (preset.model.encoder_layers, preset.model.decoder_layers, preset.train.members) == (6, 6, 2)
    small = compose(["experiment=multi30k_en_de_paper", "model=transformer_small"]).model
    assert (small.encoder_layers, small.decoder_layers, small.d_model) == (6, 6, 256)
    mini = compose(["experiment=multi30k_en_de", "model=transformer_mini"]).model
    assert (mini.encoder_layers, mini.decoder_layers) == (4, 4)
