"""One model, two target languages: per-pair validation and test scores, best by the mean, mt-eval per pair."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
from helpers import load_script, tiny_config

from mt.checkpoint import load_checkpoint
from mt.cli import evaluate as evaluate_cli
from mt.eval.scoring import mean_over_pairs
from mt.train.loop import train
from mt.train.validate import ValidationSettings, validate

PAIRS = ("en-de", "en-fr")


def test_mean_over_pairs_keeps_each_pair_and_averages() -> None:
    merged = mean_over_pairs({
        "en-de": {"bleu": 10.0, "loss": 2.0, "bleu_signature": "sig"},
        "en-fr": {"bleu": 30.0, "loss": 4.0, "bleu_signature": "sig"},
    })
    assert merged == {"bleu_signature": "sig", "bleu": 20.0, "loss": 3.0,
                      "bleu_en-de": 10.0, "loss_en-de": 2.0, "bleu_en-fr": 30.0, "loss_en-fr": 4.0}


@pytest.fixture(scope="module")
def run(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("multi_run")
    cfg = tiny_config(
        tmp, "experiment=demo_multi", "train.max_updates=6", "train.validate_every=2", "train.save_every=2",
        "train.valid_bleu=true", "train.valid_bleu_max_sentences=6", "train.test_at_end=true",
        "train.average_last=0", "decode=greedy", "decode.max_len_b=8", "train.samples=4",
    )
    summary = train(cfg)
    rows = [json.loads(line) for line in (summary.run_dir / "metrics.jsonl").read_text().splitlines()]
    return cfg, summary, rows


def test_validation_logs_every_pair_and_their_mean(run) -> None:
    _, _, rows = run
    valid = [r for r in rows if r["split"] == "valid"]
    assert len(valid) >= 3
    for row in valid:
        for metric in ("bleu", "chrf", "loss", "ppl"):
            per_pair = [row[f"{metric}_{pair}"] for pair in PAIRS]
            assert row[metric] == pytest.approx(sum(per_pair) / len(per_pair))
    assert valid[-1]["chrf_en-de"] != valid[-1]["chrf_en-fr"]  # really scored apart


def test_best_checkpoint_is_chosen_by_the_mean(run) -> None:
    _, summary, rows = run
    state = load_checkpoint(summary.run_dir / "checkpoints" / "best.pt")["train_state"]
    valid = [r for r in rows if r["split"] == "valid"]
    best = max(valid, key=lambda r: r["bleu"])  # the first of equal means wins
    assert state["best_metric_name"] == "bleu"
    assert state["best_metric"] == pytest.approx(best["bleu"])
    assert state["best_step"] == best["step"]


def test_the_test_at_the_end_reports_each_pair(run) -> None:
    cfg, summary, rows = run
    results = json.loads((summary.run_dir / "test_results.json").read_text())
    assert set(results["pairs"]) == set(PAIRS)
    assert results["sentences"] == 2 * cfg.data.demo.test_size
    assert results["bleu"] == pytest.approx(sum(results["pairs"][p]["bleu"] for p in PAIRS) / 2)
    assert rows[-1]["split"] == "test" and {f"chrf_{p}" for p in PAIRS} <= set(rows[-1])
    refs = {ref for _, ref, _ in summary.samples}
    assert any(" et " in r or "-" in r for r in refs) and len(summary.samples) == cfg.train.samples


def test_validate_with_one_pair_has_no_pair_keys(run) -> None:
    from mt import checkpoint as ckpt
    from mt.data import prepare_data

    cfg, summary, _ = run
    model, tokenizers, _ = ckpt.load_for_inference(summary.run_dir / "checkpoints" / "best.pt", torch.device("cpu"))
    split = prepare_data(cfg.data, splits=("valid",)).splits["valid"]
    settings = ValidationSettings.from_config(cfg)
    one = ValidationSettings(**{**settings.__dict__, "pairs": settings.pairs[:1], "multilingual": False,
                                "bleu": False})
    assert set(validate(model, tokenizers, split.pair_split(0), one, torch.device("cpu"))) == {"loss", "nll_loss",
                                                                                               "ppl"}


def test_mt_eval_scores_every_pair_of_the_split(run, tmp_path: Path, capsys) -> None:
    _, summary, _ = run
    ckpt = str(summary.run_dir / "checkpoints" / "best.pt")
    out = tmp_path / "reports"
    assert evaluate_cli.main(["--ckpt", ckpt, "--split", "test", "--out-dir", str(out), "--name", "m",
                              "--align", "1", "--examples", "1", "--no-lowercase-bleu"]) == 0
    table = json.loads((out / "m.pairs.json").read_text())
    assert set(table["pairs"]) == set(PAIRS)
    for pair in PAIRS:
        report = json.loads((out / f"m.{pair}.json").read_text())
        assert report["data"]["target_lang"] == pair.split("-")[1]
        assert table["pairs"][pair]["BLEU"] == pytest.approx(report["metrics"]["bleu"]["score"])
    assert "mean over 2 pairs" in capsys.readouterr().out
    assert evaluate_cli.main(["--ckpt", ckpt, "--split", "test", "--out-dir", str(out), "--pair", "en-fr",
                              "--name", "fr", "--align", "--no-lowercase-bleu"]) == 0
    assert (out / "fr.en-fr.json").is_file() and not (out / "fr.pairs.json").exists()
    assert evaluate_cli.main(["--ckpt", ckpt, "--split", "test", "--out-dir", str(out), "--pair", "en-cs"]) == 1
    assert "en-de, en-fr" in capsys.readouterr().err


def test_mt_eval_of_files_asks_which_pair(run, tmp_path: Path, capsys) -> None:
    _, summary, _ = run
    ckpt = str(summary.run_dir / "checkpoints" / "best.pt")
    (tmp_path / "src.en").write_text("twenty-one\nfive\n")
    (tmp_path / "ref.fr").write_text("vingt et un\ncinq\n")
    files = ["--ckpt", ckpt, "--src", str(tmp_path / "src.en"), "--ref", str(tmp_path / "ref.fr"),
             "--out-dir", str(tmp_path), "--align", "--no-lowercase-bleu"]
    assert evaluate_cli.main(files) == 1
    assert "--pair" in capsys.readouterr().err
    assert evaluate_cli.main([*files, "--pair", "en-fr", "--name", "f"]) == 0
    assert json.loads((tmp_path / "f.en-fr.json").read_text())["data"]["target_lang"] == "fr"


def test_mt_eval_reject_counts_the_tag(run, tmp_path: Path, monkeypatch, capsys) -> None:
    _, summary, _ = run
    line = "twenty-one"
    real = evaluate_cli.load_translator

    def tight(args):  # a source limit the line meets alone, not with its target tag
        translator, cfg, path = real(args)
        translator.max_src_len = len(translator.tokenizers.src.encode(line))
        return translator, cfg, path

    monkeypatch.setattr(evaluate_cli, "load_translator", tight)
    (tmp_path / "src.en").write_text(line + "\n")
    (tmp_path / "ref.fr").write_text("vingt et un\n")
    assert evaluate_cli.main(["--ckpt", str(summary.run_dir / "checkpoints" / "best.pt"), "--src",
                              str(tmp_path / "src.en"), "--ref", str(tmp_path / "ref.fr"), "--out-dir",
                              str(tmp_path), "--pair", "en-fr", "--on-too-long", "reject"]) == 1
    assert "src.en:1:" in capsys.readouterr().err


def test_compare_pairs_tables_one_model_against_one_pair_models(run, tmp_path: Path, capsys) -> None:
    cfg, summary, _ = run
    single = tiny_config(
        tmp_path, "experiment=demo", "train.max_updates=2", "train.validate_every=2", "train.save_every=2",
        "train.valid_bleu=true", "train.valid_bleu_max_sentences=4", "train.test_at_end=true",
        "train.average_last=0", "decode=greedy", "decode.max_len_b=8",
    )
    single_dir = train(single).run_dir
    compare = load_script("compare_pairs")
    plot = tmp_path / "curves.png"
    assert compare.main(["--multi", str(summary.run_dir), "--single", str(single_dir), "--plot", str(plot)]) == 0
    out = capsys.readouterr().out
    multi_test = json.loads((summary.run_dir / "test_results.json").read_text())
    single_test = json.loads((single_dir / "test_results.json").read_text())
    de = next(line for line in out.splitlines() if line.startswith("| en-de |"))
    assert f"{single_test['bleu']:.2f} / {single_test['chrf']:.2f}" in de
    assert f"{multi_test['pairs']['en-de']['bleu']:.2f}" in de
    assert "| en-fr | - |" in out  # no one-pair model of en-fr given
    assert "parameters to deploy" in out and plot.stat().st_size > 0
