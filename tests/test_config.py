"""Every config composes against its dataclass; unknown keys fail at compose time."""

from pathlib import Path

import pytest
from helpers import CONF_DIR, compose_config
from hydra.errors import ConfigCompositionException
from omegaconf.errors import ConfigKeyError

from mt.config import Config

EXPERIMENTS = sorted(p.stem for p in (Path(CONF_DIR) / "experiment").glob("*.yaml"))
GROUPS = {g: sorted(p.stem for p in (Path(CONF_DIR) / g).glob("*.yaml")) for g in ("data", "model", "decode")}


@pytest.mark.parametrize("experiment", EXPERIMENTS)
def test_every_experiment_composes(experiment):
    cfg = compose_config([f"experiment={experiment}"])
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
