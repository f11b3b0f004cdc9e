"""The translate and evaluate command lines, in process, on a tiny checkpoint written like training does."""

from __future__ import annotations

import gzip
import json
from pathlib import Path

import pytest
import torch

import mt
from mt.checkpoint import save_checkpoint, tokenizers_state
from mt.cli import evaluate as evaluate_cli
from mt.cli import translate as translate_cli
from mt.config import Config, ModelConfig, to_dict
from mt.data import Tokenizers, train_tokenizer
from mt.model import build_model


@pytest.fixture(scope="module")
def run(tmp_path_factory, multi30k_dir: Path) -> Path:
    """A working directory holding runs/tiny/checkpoints/best.pt (random weights, step 77) and text files."""
    root = tmp_path_factory.mktemp("cli")
    with gzip.open(multi30k_dir / "val.en.gz", "rt") as f_en, gzip.open(multi30k_dir / "val.de.gz", "rt") as f_de:
        en = [next(f_en).rstrip("\n") for _ in range(300)]
        de = [next(f_de).rstrip("\n") for _ in range(300)]
    tokenizer = train_tokenizer(iter(en + de), vocab_size=300)
    cfg = Config(name="tiny", model=ModelConfig(encoder_layers=1, decoder_layers=1, d_model=32, d_ff=64,
                                                heads=4, dropout=0.0, max_positions=100))
    cfg.train.run_dir = str(root / "runs/tiny")
    cfg.decode.max_len_b = 5
    torch.manual_seed(0)
    model = build_model(cfg.model, tokenizer.padded_vocab_size, tokenizer.padded_vocab_size)
    state = {"model": model.state_dict(), "config": to_dict(cfg), "train_state": {"step": 77},
             "tokenizers": tokenizers_state(Tokenizers(tokenizer, tokenizer, joint=True))}
    save_checkpoint(root / "runs/tiny/checkpoints/best.pt", state)
    (root / "src.en").write_text("\n".join([*en[:6], "", "word " * 60]) + "\n")
    (root / "ref.de").write_text("\n".join([*de[:6], "", "Wort"]) + "\n")
    return root


def test_translate_file_to_file(run: Path, monkeypatch) -> None:
    monkeypatch.chdir(run)
    with pytest.warns(UserWarning, match="line 8: 181 source pieces"):
        rc = translate_cli.main(["--exp", "tiny", "--input", "src.en", "--output", "out.txt", "--beam", "2",
                                 "--threads", "1", "--device", "cpu"])
    assert rc == 0
    out = (run / "out.txt").read_text().split("\n")
    assert len(out) == 9 and out[6] == "" and out[8] == ""  # 8 lines + the final newline


def test_translate_nbest_format_and_errors(run: Path, monkeypatch, capsys) -> None:
    monkeypatch.chdir(run)
    with pytest.warns(UserWarning, match="truncated"):
        rc = translate_cli.main(["--ckpt", "runs/tiny/checkpoints/best.pt", "--input", "src.en", "--nbest", "2",
                                 "--beam", "3", "--on-too-long", "truncate", "--lenpen", "none"])
    lines = capsys.readouterr().out.splitlines()
    assert rc == 0 and len(lines) == 7 * 2  # the empty line gives no hypotheses
    assert lines[0].startswith("1 ||| ") and lines[1].startswith("1 ||| ")
    assert float(lines[0].rsplit("|||", 1)[1]) >= float(lines[1].rsplit("|||", 1)[1])
    assert translate_cli.main(["--exp", "tiny", "--input", "src.en", "--on-too-long", "reject"]) == 1
    assert "src.en:8:" in capsys.readouterr().err  # file:line
    assert translate_cli.main(["--ckpt", "missing.pt", "--input", "src.en"]) == 1
    assert "checkpoint not found" in capsys.readouterr().err


def test_evaluate_writes_the_report(run: Path, monkeypatch) -> None:
    monkeypatch.chdir(run)
    with pytest.warns(UserWarning):
        rc = evaluate_cli.main(["--exp", "tiny", "--src", "src.en", "--ref", "ref.de", "--strategy", "greedy",
                                "--align", "1", "3", "--out-dir", "rep", "--threads", "1"])
    assert rc == 0
    report = json.loads((run / "rep/tiny.src.en.greedy.json").read_text())
    assert report["checkpoint"]["step"] == 77 and report["checkpoint"]["config"]["name"] == "tiny"
    assert report["decoding"]["strategy"] == "greedy" and report["decoding"]["max_len_b"] == 5
    assert report["speed"]["threads"] == 1 and "bleu_lowercase" in report["metrics"]
    assert report["mt_version"] == mt.__version__
    assert (run / "rep/tiny.src.en.greedy.align-3.png").is_file()
    with pytest.raises(SystemExit):
        evaluate_cli.main(["--exp", "tiny", "--src", "src.en"])  # no --ref, no --split


def test_a_failed_evaluation_leaves_no_report_and_keeps_the_old_one(run: Path, monkeypatch, capsys) -> None:
    """Files are staged and moved into --out-dir only when everything was written (regression: a half report)."""
    import mt.eval.report as report_module

    monkeypatch.chdir(run)
    args = ["--exp", "tiny", "--src", "src.en", "--ref", "ref.de", "--strategy", "greedy", "--max-len-b", "2",
            "--name", "r", "--threads", "1"]

    def broken_plot(*_args, **_kwargs):
        raise OSError(28, "No space left on device", "r.align-1.png")

    monkeypatch.setattr(report_module, "plot_alignment", broken_plot)
    with pytest.warns(UserWarning):
        assert evaluate_cli.main([*args, "--out-dir", "fresh"]) == 1
    assert "r.align-1.png: No space left on device" in capsys.readouterr().err
    assert not (run / "fresh").exists()  # created for this report, removed again
    (run / "old").mkdir()
    (run / "old/r.json").write_text("{}\n")
    with pytest.warns(UserWarning):
        assert evaluate_cli.main([*args, "--out-dir", "old"]) == 1
    assert sorted(p.name for p in (run / "old").iterdir()) == ["r.json"] and (run / "old/r.json").read_text() == "{}\n"
