"""train.ema_decay: the moving average's arithmetic, what checkpoints hold, and an exact resume."""

import json

import pytest
import torch
from helpers import tiny_config
from torch import nn

from mt.checkpoint import RAW_MODEL_KEY, average_checkpoints, load_checkpoint, load_for_inference
from mt.train.ema import WeightAverage
from mt.train.trainer import Trainer
from mt.train.validate import ValidationSettings, validate


class Tied(nn.Module):
    """Two names for one weight, as the tied embeddings and output projection."""

    def __init__(self) -> None:
        super().__init__()
        self.embed = nn.Embedding(3, 2)
        self.out = nn.Linear(2, 3, bias=False)
        self.out.weight = self.embed.weight
        self.register_buffer("count", torch.tensor(7))


def test_the_average_follows_the_warmed_up_decay():
    model = nn.Linear(1, 1, bias=False)
    with torch.no_grad():
        model.weight.fill_(0.0)
    average = WeightAverage(model, decay=0.5)
    expected = 0.0
    for step, value in enumerate([1.0, 2.0, 4.0, 8.0, 16.0, 32.0], start=1):
        with torch.no_grad():
            model.weight.fill_(value)
        average.update(step)
        d = min(0.5, (1 + step) / (10 + step))  # 2/11, 3/12, 4/13, 5/14, then 0.5
        expected = d * expected + (1 - d) * value
        assert average.average[0].item() == pytest.approx(expected, rel=1e-6)
    assert average.decay_at(1) == pytest.approx(2 / 11) and average.decay_at(10_000) == 0.5


def test_state_dict_puts_the_average_under_every_name_of_a_tied_weight_and_keeps_buffers():
    model = Tied()
    average = WeightAverage(model, decay=0.9)
    assert average.names == ["embed.weight"]  # tied: one parameter
    with torch.no_grad():
        model.embed.weight.add_(1.0)
    average.update(100)
    weights = average.state_dict()
    assert set(weights) == {"embed.weight", "out.weight", "count"}
    assert torch.equal(weights["embed.weight"], average.average[0])
    assert torch.equal(weights["out.weight"], average.average[0])
    assert not torch.equal(weights["embed.weight"], model.embed.weight)
    assert weights["count"].item() == 7


def test_applied_swaps_the_average_in_and_always_puts_the_weights_back():
    model = Tied()
    average = WeightAverage(model, decay=0.9)
    own = model.embed.weight.detach().clone()
    with torch.no_grad():
        average.average[0].fill_(3.0)
    with average.applied():
        assert torch.all(model.embed.weight == 3.0) and torch.all(model.out.weight == 3.0)
    assert torch.equal(model.embed.weight, own)
    with pytest.raises(RuntimeError), average.applied():
        raise RuntimeError("validation failed")
    assert torch.equal(model.embed.weight, own)


def test_checkpoints_hold_the_average_as_model_and_resume_exactly(tmp_path):
    """Four updates straight against two, a restart of the process, and two more: the same weights, average
    and optimizer weights; the checkpoint's model is the average, the validated one."""
    settings = ("train.ema_decay=0.9", "train.validate_every=2", "train.save_every=2", "train.keep_last=0")
    straight = Trainer(tiny_config(tmp_path / "a", "train.max_updates=4", *settings))
    assert straight.run() == "max_updates"
    first = Trainer(tiny_config(tmp_path / "b", "train.max_updates=2", *settings))
    assert first.run() == "max_updates"
    resumed = Trainer(tiny_config(tmp_path / "b", "train.max_updates=4", *settings))
    assert resumed.state.step == 2 and resumed.run() == "max_updates"

    a = load_checkpoint(tmp_path / "a" / "run" / "checkpoints" / "checkpoint_4.pt")
    b = load_checkpoint(tmp_path / "b" / "run" / "checkpoints" / "checkpoint_4.pt")
    for key in ("model", RAW_MODEL_KEY):
        assert a[key].keys() == b[key].keys()
        assert all(torch.equal(a[key][k], b[key][k]) for k in a[key]), key
    name = "decoder.layers.0.ffn.fc1.weight"
    assert not torch.equal(a["model"][name], a[RAW_MODEL_KEY][name])  # the average is not the weights
    assert torch.equal(a[RAW_MODEL_KEY][name], straight.model.state_dict()[name])
    assert torch.equal(a["model"][name], straight.average.state_dict()[name])

    # what the run validated at update 4 is the average: the logged loss is that of the checkpoint's model
    logged = [json.loads(line) for line in (tmp_path / "a" / "run" / "metrics.jsonl").read_text().splitlines()]
    valid_loss = next(row["loss"] for row in logged if row["split"] == "valid" and row["step"] == 4)
    model, tokenizers, cfg = load_for_inference(tmp_path / "a" / "run" / "checkpoints" / "checkpoint_4.pt")
    scores = validate(model, tokenizers, straight.parts.data.splits["valid"], ValidationSettings.from_config(cfg),
                      torch.device("cpu"))
    assert scores["loss"] == pytest.approx(valid_loss, rel=1e-6)

    averaged = average_checkpoints([tmp_path / "a" / "run" / "checkpoints" / f"checkpoint_{s}.pt" for s in (2, 4)])
    assert RAW_MODEL_KEY not in averaged
    two = load_checkpoint(tmp_path / "a" / "run" / "checkpoints" / "checkpoint_2.pt")
    assert torch.allclose(averaged["model"][name], (two["model"][name] + a["model"][name]) / 2)


def test_turning_the_average_on_when_resuming_starts_it_from_the_weights(tmp_path):
    assert Trainer(tiny_config(tmp_path, "train.max_updates=2", "train.validate_every=1000")).run() == "max_updates"
    resumed = Trainer(tiny_config(tmp_path, "train.max_updates=2", "train.ema_decay=0.9"))
    assert resumed.state.step == 2
    weights = resumed.model.state_dict()
    assert all(torch.equal(weights[k], v) for k, v in resumed.average.state_dict().items())


def test_turning_the_average_off_when_resuming_goes_on_from_the_optimizers_weights(tmp_path):
    first = Trainer(tiny_config(tmp_path, "train.max_updates=2", "train.validate_every=1000", "train.ema_decay=0.9"))
    assert first.run() == "max_updates"
    stored = load_checkpoint(tmp_path / "run" / "checkpoints" / "last.pt")
    resumed = Trainer(tiny_config(tmp_path, "train.max_updates=2"))
    assert resumed.state.step == 2 and resumed.average is None
    assert all(torch.equal(resumed.model.state_dict()[k], v) for k, v in stored[RAW_MODEL_KEY].items())
