"""train.init_from (EXP=finetune): a run that starts from an imported model's weights and tokenizers."""

from __future__ import annotations

import gzip
import json

import pytest
import torch
from helpers import compose_config
from pretrained_helpers import captions, marian_directory

from mt.checkpoint import CheckpointError, load_checkpoint, load_tokenizers_and_config
from mt.config import ConfigError
from mt.pretrained import import_hf
from mt.train.trainer import Trainer

pytestmark = pytest.mark.filterwarnings("ignore:Recommended. pip install sacremoses")


@pytest.fixture(scope="module")
def imported(tmp_path_factory, multi30k_dir):
    base = tmp_path_factory.mktemp("finetune")
    directory = marian_directory(base / "hf", multi30k_dir, d_model=32, layers=1)
    return import_hf(directory, base / "model.pt").out


@pytest.fixture(scope="module")
def corpus(tmp_path_factory, multi30k_dir):
    """300 training pairs of Multi30k (lines the tokenizers were not trained on), 40 valid, 40 test."""
    out = tmp_path_factory.mktemp("corpus")
    english, german = captions(multi30k_dir, "en", 2400)[2020:], captions(multi30k_dir, "de", 2400)[2020:]
    for prefix, rows in (("train", slice(0, 300)), ("val", slice(300, 340)), ("test", slice(340, 380))):
        for lang, lines in (("en", english), ("de", german)):
            with gzip.open(out / f"{prefix}.{lang}.gz", "wt", encoding="utf-8") as f:
                f.write("".join(line + "\n" for line in lines[rows]))
    return out


def finetune_config(tmp_path, ckpt, corpus, *extra):
    return compose_config([
        "experiment=finetune", f"train.init_from={ckpt}", f"data.dir={corpus}", "data.train_prefix=[train]",
        "data.test_prefix=test", "data.max_tokens=600", "data.num_workers=1", f"train.run_dir={tmp_path / 'run'}",
        f"data.cache_dir={tmp_path / 'cache'}", "optim.lr=0.003", "optim.warmup_updates=5", "model.dropout=0.0",
        "train.validate_every=10", "train.save_every=10", "train.max_updates=30", "train.log_every=1",
        "train.progress=false", "train.tensorboard=false", "train.valid_bleu=false", "train.test_at_end=false",
        "train.threads=1", *extra,
    ])


def logged(run_dir, split):
    rows = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
    return [row for row in rows if row["split"] == split]


def test_finetuning_an_imported_model_lowers_the_valid_loss(tmp_path, imported, corpus):
    cfg = finetune_config(tmp_path, imported, corpus)
    trainer = Trainer(cfg)
    model_cfg = trainer.cfg.model
    assert (model_cfg.activation, model_cfg.sinusoid, model_cfg.logits_bias) == ("silu", "marian", True)
    start = load_checkpoint(imported)["model"]
    assert all(torch.equal(start[k], v) for k, v in trainer.model.state_dict().items())  # its weights
    assert trainer.run() == "max_updates"
    valid = [row["loss"] for row in logged(tmp_path / "run", "valid")]
    assert len(valid) == 3 and valid[-1] < valid[0] - 0.5, valid
    tokenizers, _ = load_tokenizers_and_config(tmp_path / "run" / "checkpoints" / "last.pt")
    original, _ = load_tokenizers_and_config(imported)
    assert tokenizers.tgt.vocab == original.tgt.vocab  # the imported vocabulary, not a new one


def test_a_resumed_finetuning_run_continues_with_the_same_losses(tmp_path, imported, corpus):
    straight = finetune_config(tmp_path / "a", imported, corpus, "train.max_updates=12", "train.save_every=6")
    Trainer(straight).run()
    first = finetune_config(tmp_path / "b", imported, corpus, "train.max_updates=6", "train.save_every=6")
    Trainer(first).run()
    resumed = Trainer(finetune_config(tmp_path / "b", imported, corpus, "train.max_updates=12",
                                      "train.save_every=6"))
    assert resumed.state.step == 6
    resumed.run()
    losses = [(row["step"], row["loss"]) for row in logged(tmp_path / "a" / "run", "train")]
    again = [(row["step"], row["loss"]) for row in logged(tmp_path / "b" / "run", "train")]
    assert again[-6:] == losses[-6:]


def test_the_preset_needs_a_checkpoint_that_exists(tmp_path, corpus):
    with pytest.raises(ConfigError, match="train.init_from=REQUIRED: give the checkpoint to start from"):
        compose_config(["experiment=finetune", f"train.run_dir={tmp_path}"])
    with pytest.raises(CheckpointError, match="train.init_from=.*missing.pt: no such checkpoint"):
        Trainer(finetune_config(tmp_path, tmp_path / "missing.pt", corpus))
