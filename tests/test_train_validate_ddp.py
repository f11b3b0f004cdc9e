"""Validation sharded over 2 gloo ranks gives the loss, hypotheses and BLEU of one process."""

from __future__ import annotations

import dataclasses
import json
import tempfile
from pathlib import Path

import pytest
import torch
import torch.distributed as dist
import torch.multiprocessing as mp
from helpers import TINY

from mt.config import DataConfig, DecodeConfig, compose
from mt.data import PAD_ID, PreparedData, prepare_data
from mt.model import build_model
from mt.train.distributed import DistInfo
from mt.train.validate import ValidationSettings, valid_translations, validate, validation_decode_config

BEAM = validation_decode_config(DecodeConfig(), beam_size=2)


def _data_cfg(cache: Path) -> DataConfig:
    return compose([*TINY, f"data.cache_dir={cache}", "data.demo.valid_size=41"]).data  # 41: uneven shares


def _settings() -> ValidationSettings:
    return ValidationSettings(max_tokens=96, pad_to_multiple=8, label_smoothing=0.1, bleu=True,
                              decode=validation_decode_config(DecodeConfig(), beam_size=1), max_positions=128)


def _scores(data: PreparedData, info: DistInfo) -> dict:
    """Greedy loss + BLEU, and beam-2 hypotheses, of a fixed random tiny model."""
    cfg = compose(TINY).model
    torch.manual_seed(3)
    vocab = data.tokenizers.src.padded_vocab_size
    model = build_model(dataclasses.replace(cfg, dropout=0.0), vocab, vocab, PAD_ID)
    valid = data.splits["valid"]
    scores = validate(model, data.tokenizers, valid, _settings(), torch.device("cpu"), dist=info)
    assert model.training  # back in train mode
    hyps = valid_translations(model, data.tokenizers, valid, BEAM, torch.device("cpu"), max_positions=128, dist=info)
    return {"scores": scores, "hyps": hyps}


def _worker(rank: int, world: int, init_file: str, cache: str, out_dir: str) -> None:
    dist.init_process_group("gloo", init_method=f"file://{init_file}", rank=rank, world_size=world)
    torch.set_num_threads(1)
    try:
        data = prepare_data(_data_cfg(Path(cache)), splits=("valid",))  # cached by the parent
        result = _scores(data, DistInfo(rank=rank, world_size=world))
        Path(out_dir, f"rank{rank}.json").write_text(json.dumps(result))
    finally:
        dist.destroy_process_group()


def test_two_gloo_ranks_validate_like_one_process(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    data = prepare_data(_data_cfg(tmp_path / "cache"), splits=("valid",))
    assert len(data.splits["valid"]) == 41
    single = _scores(data, DistInfo())
    assert len(set(single["hyps"])) > 5  # the order check below means something

    mp.spawn(_worker, args=(2, tempfile.mktemp(dir=tmp_path), str(tmp_path / "cache"), str(tmp_path)),
             nprocs=2, join=True)
    ranks = [json.loads((tmp_path / f"rank{r}.json").read_text()) for r in range(2)]
    assert ranks[0] == ranks[1]  # every rank returns the same scores and hypotheses
    assert ranks[0]["hyps"] == single["hyps"]  # shares put back in order
    two, one = ranks[0]["scores"], single["scores"]
    assert set(two) == set(one) == {"loss", "nll_loss", "ppl", "bleu", "chrf", "bleu_signature"}
    for key in ("loss", "nll_loss", "ppl"):
        assert two[key] == pytest.approx(one[key], rel=1e-5), key
    assert (two["bleu"], two["chrf"], two["bleu_signature"]) == (one["bleu"], one["chrf"], one["bleu_signature"])
    assert one["chrf"] > 0


PAIRS = "data.pairs=[en-de,en-fr]"


def _pair_scores(cache: Path, info: DistInfo) -> dict:
    """Per-pair greedy loss + BLEU of a fixed random tiny model on a two-target demo valid split."""
    cfg = compose([*TINY, f"data.cache_dir={cache}", "data.demo.valid_size=13", PAIRS])
    data = prepare_data(cfg.data, splits=("valid",))
    torch.manual_seed(3)
    vocab = data.tokenizers.src.padded_vocab_size
    model = build_model(dataclasses.replace(cfg.model, dropout=0.0), vocab, vocab, PAD_ID)
    settings = dataclasses.replace(_settings(), pairs=tuple(ValidationSettings.from_config(cfg).pairs),
                                   multilingual=True)
    return validate(model, data.tokenizers, data.splits["valid"], settings, torch.device("cpu"), dist=info)


def _pairs_worker(rank: int, world: int, init_file: str, cache: str, out_dir: str) -> None:
    dist.init_process_group("gloo", init_method=f"file://{init_file}", rank=rank, world_size=world)
    torch.set_num_threads(1)
    try:
        scores = _pair_scores(Path(cache), DistInfo(rank=rank, world_size=world))
        Path(out_dir, f"pairs{rank}.json").write_text(json.dumps(scores))
    finally:
        dist.destroy_process_group()


def test_two_gloo_ranks_validate_each_language_pair_like_one_process(tmp_path: Path) -> None:
    one = _pair_scores(tmp_path / "cache", DistInfo())
    assert {"bleu_en-de", "bleu_en-fr", "loss_en-de", "loss_en-fr"} <= set(one)
    mp.spawn(_pairs_worker, args=(2, tempfile.mktemp(dir=tmp_path), str(tmp_path / "cache"), str(tmp_path)),
             nprocs=2, join=True)
    ranks = [json.loads((tmp_path / f"pairs{r}.json").read_text()) for r in range(2)]
    assert ranks[0] == ranks[1] and set(ranks[0]) == set(one)
    for key, value in one.items():
        if isinstance(value, str) or key.startswith(("bleu", "chrf")):
            assert ranks[0][key] == value, key
        else:
            assert ranks[0][key] == pytest.approx(value, rel=1e-5), key
