"""Ensembles (``mt.model.ensemble``): the members' mean distribution, every search over it, and loading."""

from __future__ import annotations

import dataclasses
import json
import re
from pathlib import Path

import pytest
import torch
from export_helpers import demo_model, untrained_checkpoint
from test_model_seq2seq import VOCAB, random_batch

from mt.checkpoint import CheckpointError, load_checkpoint, load_for_inference, load_models_for_inference
from mt.cli.translate import main as translate_main
from mt.config import ConfigError, DecodeConfig, ModelConfig
from mt.decode import Translator
from mt.decode.beam import beam_search
from mt.decode.greedy import greedy_search
from mt.model import Ensemble, build_model
from mt.runs import experiment_checkpoints, write_ensemble_record


def tiny(seed: int, layers: int = 2):
    torch.manual_seed(seed)
    cfg = ModelConfig(encoder_layers=layers, decoder_layers=layers, d_model=32, d_ff=64, heads=4, dropout=0.0)
    model = build_model(cfg, VOCAB, VOCAB).eval()
    with torch.no_grad():  # larger weights: outputs that follow the source, so the members disagree
        for p in model.parameters():
            p.mul_(3.0)
    return model


@pytest.fixture(scope="module")
def demo(tmp_path_factory):
    return demo_model(tmp_path_factory.getbasetemp() / "export_demo")  # trained once, shared with the export tests


@torch.inference_mode()
def test_an_ensemble_decodes_the_log_of_its_members_mean_probabilities() -> None:
    members = [tiny(1), tiny(2, layers=1)]
    ensemble = Ensemble(members)
    src, src_mask = random_batch([5, 8, 3])
    tgt, _ = random_batch([4, 4, 4], bos=True)
    got = ensemble.decode(tgt, ensemble.encode(src, src_mask))  # (B, T, V)
    probs = [m.decode(tgt, m.encode(src, src_mask)).float().softmax(dim=-1) for m in members]
    assert torch.allclose(got, torch.stack(probs).mean(dim=0).log(), atol=1e-5)
    assert torch.allclose(got.exp().sum(dim=-1), torch.ones(3, tgt.size(1)), atol=1e-5)

    cache = ensemble.new_cache()  # step by step with the members' caches: the same
    enc = ensemble.encode(src, src_mask)
    steps = torch.cat([ensemble.decode(tgt[:, t : t + 1], enc, cache) for t in range(tgt.size(1))], dim=1)
    assert torch.allclose(steps, got, atol=1e-5)


@pytest.mark.parametrize("beam", [1, 3])
@torch.inference_mode()
def test_sentences_joining_an_ensemble_decode_as_whole_batches(beam: int) -> None:
    """Continuous batching copies, reorders and extends every member's state together."""
    ensemble = Ensemble([tiny(1), tiny(2, layers=1)])
    lengths = [7, 3, 9, 5, 2, 6, 8, 4]
    src, src_mask = random_batch(lengths)
    cfg = DecodeConfig(strategy="greedy" if beam == 1 else "beam", beam_size=beam, nbest=1, max_len_a=1.0,
                       max_len_b=4, min_len=2)
    search = greedy_search if beam == 1 else beam_search
    whole = search(ensemble, src, src_mask, cfg)
    refilled = search(ensemble, src, src_mask, cfg, live=[3] * len(lengths))
    assert [h[0].tokens for h in refilled] == [h[0].tokens for h in whole]
    assert [h[0].score for h in refilled] == pytest.approx([h[0].score for h in whole], rel=1e-5, abs=1e-5)
    assert len({tuple(h[0].tokens) for h in whole}) > 1


@pytest.mark.parametrize("strategy", ["greedy", "beam"])
def test_a_model_ensembled_with_itself_translates_as_the_model(demo, strategy: str) -> None:
    model, tokenizers, cfg = load_for_inference(demo.ckpt, pack=True)
    twice, _, _ = load_models_for_inference([demo.ckpt, demo.ckpt], pack=True)
    settings = dataclasses.replace(cfg.decode, strategy=strategy, beam_size=4 if strategy == "beam" else 1, nbest=1)
    alone = Translator(model, tokenizers, settings, max_positions=cfg.model.max_positions).translate(demo.sources)
    together = Translator(twice, tokenizers, settings, max_positions=cfg.model.max_positions).translate(demo.sources)
    assert isinstance(twice, Ensemble) and together == alone


def test_checkpoints_with_another_vocabulary_do_not_ensemble(tmp_path: Path) -> None:
    joint = untrained_checkpoint(tmp_path / "joint" / "a.pt")
    separate = untrained_checkpoint(
        tmp_path / "separate" / "b.pt", "data.joint_vocab=false", "model.share_all_embeddings=false"
    )
    with pytest.raises(CheckpointError, match=r"b\.pt has another vocabulary than .*a\.pt"):
        load_models_for_inference([joint, separate])


def test_mt_translate_takes_several_checkpoints_as_one_ensemble(demo, tmp_path: Path, capsys) -> None:
    source = tmp_path / "test.src"
    source.write_text("\n".join(demo.sources[:20]) + "\n", encoding="utf-8")
    outputs = {}
    for name, ckpts in (("one", [demo.ckpt]), ("two", [demo.ckpt, demo.ckpt])):
        outputs[name] = tmp_path / f"{name}.txt"
        argv = ["--ckpt", *map(str, ckpts), "--input", str(source), "--output", str(outputs[name]),
                "--strategy", "greedy"]
        assert translate_main(argv) == 0
    assert "an ensemble of 2" in capsys.readouterr().err
    assert outputs["two"].read_text(encoding="utf-8") == outputs["one"].read_text(encoding="utf-8")


def test_mt_translate_exp_decodes_the_members_a_run_recorded(demo, tmp_path: Path, monkeypatch, capsys) -> None:
    run = tmp_path / "runs" / "pair"
    for k in (1, 2):
        (run / f"member_{k}").mkdir(parents=True)
        (run / f"member_{k}" / "chosen.pt").symlink_to(demo.ckpt)
    write_ensemble_record(run, [run / "member_1" / "chosen.pt", run / "member_2" / "chosen.pt"])
    monkeypatch.chdir(tmp_path)
    source = tmp_path / "test.src"
    source.write_text("\n".join(demo.sources[:5]) + "\n", encoding="utf-8")
    argv = ["--exp", "pair", "--input", str(source), "--output", str(tmp_path / "out.txt"), "--strategy", "greedy"]
    assert translate_main(argv) == 0
    assert "an ensemble of 2" in capsys.readouterr().err
    (run / "member_2" / "chosen.pt").unlink()  # a member gone: named, as a missing --ckpt is
    assert translate_main(argv) == 1
    assert "checkpoint not found: runs/pair/member_2/chosen.pt" in capsys.readouterr().err


def test_train_members_trains_each_member_then_tests_them_as_one_ensemble(tmp_path: Path, capsys) -> None:
    from helpers import tiny_config

    from mt.train.loop import train

    cfg = tiny_config(tmp_path, "train.members=2", "train.max_updates=6", "train.save_every=3",
                      "train.validate_every=3", "train.keep_last=2", "train.average_last=2", "train.seed=5",
                      "train.test_at_end=true")
    summary = train(cfg)
    run = Path(cfg.train.run_dir)
    out = capsys.readouterr().out
    assert "member 1 of 2: seed 5" in out and "member 2 of 2: seed 6" in out
    assert "Finished an ensemble of 2 members" in out
    results = json.loads((run / "test_results.json").read_text())
    assert summary.test["bleu"] == results["bleu"] and len(results["members"]) == 2
    for k, seed in ((1, 5), (2, 6)):
        member = run / f"member_{k}"
        assert str(member) in results["members"][k - 1]
        stored = load_checkpoint(member / "checkpoints" / "last.pt")
        assert stored["config"]["train"]["seed"] == seed and stored["train_state"]["step"] == 6
    assert not (run / "member_1" / "test_results.json").exists()  # members are tested together only
    assert [str(p) for p in experiment_checkpoints(run)] == results["members"]  # what --exp decodes now

    again = train(cfg)  # a rerun resumes: both members are done, the ensemble is tested again
    assert again.test["bleu"] == summary.test["bleu"]


def test_later_members_train_another_architecture_and_decode_with_the_first_as_one_ensemble(
    tmp_path: Path, capsys
) -> None:
    from helpers import tiny_config

    from mt.train.loop import train

    cfg = tiny_config(tmp_path, "train.members=2", "train.max_updates=4", "train.save_every=2",
                      "train.validate_every=2", "train.test_at_end=true", "+train.later_members.model.d_model=48",
                      "+train.later_members.model.decoder_layers=2", "+train.later_members.optim.warmup_updates=7")
    summary = train(cfg)
    out = capsys.readouterr().out
    first, second = (line for line in out.splitlines() if line.startswith("member "))
    assert second.endswith(" min, model.d_model=48 model.decoder_layers=2 optim.warmup_updates=7, "
                           f"{cfg.train.run_dir}/member_2") and "model." not in first
    run = Path(cfg.train.run_dir)
    stored = [load_checkpoint(run / f"member_{k}" / "checkpoints" / "last.pt")["config"] for k in (1, 2)]
    assert [(c["model"]["d_model"], c["model"]["decoder_layers"], c["optim"]["warmup_updates"]) for c in stored] == [
        (32, 1, cfg.optim.warmup_updates), (48, 2, 7)]
    assert stored[0]["model"]["d_ff"] == stored[1]["model"]["d_ff"] == 64  # what was not named stays
    assert summary.test["bleu"] == json.loads((run / "test_results.json").read_text())["bleu"]
    models, _, _ = load_models_for_inference(experiment_checkpoints(run), "cpu")
    shapes = [(m.decoder.output_weight.size(1), len(m.decoder.layers)) for m in models.members]
    assert shapes == [(32, 1), (48, 2)]  # one ensemble of the two architectures


@pytest.mark.parametrize(
    ("override", "message"),
    [
        ("+train.later_members.model.d_modl=48", "train.later_members: Key 'd_modl' not in 'ModelConfig'"),
        ("+train.later_members.model.heads=3", "train.later_members: model.heads=3: must divide model.d_model=32"),
        ("+train.later_members.optim.lr=fast", "train.later_members: Value 'fast' of type 'str' could not be"),
    ],
)
def test_later_members_name_a_field_or_value_that_cannot_work(tmp_path: Path, override: str, message: str) -> None:
    from helpers import tiny_config

    from mt.train.members import member_configs

    with pytest.raises(ConfigError, match=re.escape(message)):
        member_configs(tiny_config(tmp_path, "train.members=2", override))
    assert member_configs(tiny_config(tmp_path, "train.members=1", override))  # one model: nothing to change


def test_later_members_change_the_model_and_optim_groups_only(tmp_path: Path) -> None:
    from helpers import tiny_config

    with pytest.raises(ConfigError, match="only the model and optim groups can change for the later members"):
        tiny_config(tmp_path, "train.members=2", "+train.later_members.data.vocab_size=200")


def test_train_members_refuses_torchrun(tmp_path: Path, monkeypatch) -> None:
    from helpers import tiny_config

    from mt.train.members import member_configs

    monkeypatch.setenv("WORLD_SIZE", "2")
    with pytest.raises(ConfigError, match="without torchrun"):
        member_configs(tiny_config(tmp_path, "train.members=2"))


@pytest.mark.parametrize(
    ("minutes", "members", "least", "expected"),
    [(112, 2, 40, 2), (55, 2, 40, 1), (100, 3, 40, 2), (130, 3, 40, 3), (10, 2, 40, 1), (55, 2, 0, 2), (0, 2, 40, 2)],
)
def test_members_that_fit_the_budget(minutes, members, least, expected) -> None:
    from mt.config import TrainConfig
    from mt.train.members import members_that_fit

    tc = TrainConfig(members=members, max_time_minutes=minutes, member_min_minutes=least)
    assert members_that_fit(tc) == expected


def test_a_budget_too_short_for_the_members_trains_one_model_and_says_so(tmp_path: Path, capsys) -> None:
    from helpers import tiny_config

    from mt.train.loop import train

    cfg = tiny_config(tmp_path, "train.members=2", "train.member_min_minutes=40", "train.max_time_minutes=55",
                      "train.max_updates=3", "train.save_every=3", "train.validate_every=3", "train.test_at_end=false")
    summary = train(cfg)
    run = Path(cfg.train.run_dir)
    out = capsys.readouterr().out
    assert "train.members=2: 55 minutes give each member less than train.member_min_minutes=40; training one " \
           "model instead" in out
    assert "member 1 of" not in out and not (run / "member_1").exists() and not (run / "ensemble.json").exists()
    assert summary.step == 3 and experiment_checkpoints(run) == [run / "checkpoints" / "best.pt"]
    assert load_checkpoint(run / "checkpoints" / "last.pt")["config"]["train"]["members"] == 1
