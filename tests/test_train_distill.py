"""train.distill: the first member's translations of the training sources join the later members' data."""

from __future__ import annotations

import dataclasses
import gzip
import json
from pathlib import Path

import pytest
from helpers import tiny_config

from mt.checkpoint import load_checkpoint, load_for_inference
from mt.config import ConfigError
from mt.data.demo import write_demo_corpus
from mt.data.errors import DataError
from mt.decode import Translator


def _files_config(tmp_path: Path, *extra: str):
    """The tiny demo run on the demo corpus written as local parallel files (what distillation needs)."""
    demo = tiny_config(tmp_path).data.demo
    corpus = write_demo_corpus(demo, tmp_path / "corpus")
    return tiny_config(tmp_path, "data.source=files", f"data.dir={corpus}", "data.valid_prefix=valid",
                       "data.test_prefix=test", "train.members=2", "train.distill=true", "train.max_updates=6",
                       "train.save_every=3", "train.validate_every=3", "train.keep_last=2", "train.average_last=2",
                       "decode.strategy=greedy", *extra)


def _lines(path: Path) -> list[str]:
    with gzip.open(path, "rt", encoding="utf-8") as f:
        return f.read().splitlines()


def test_the_second_member_trains_on_the_firsts_translations_with_its_vocabulary(tmp_path: Path, capsys) -> None:
    from mt.train.loop import train

    cfg = _files_config(tmp_path, "train.test_at_end=true")
    train(cfg)
    run = Path(cfg.train.run_dir)
    distilled = run / "distilled"
    record = json.loads((distilled / "distill.json").read_text())
    first = run / "member_1" / "checkpoints"
    teacher = Path(record["teacher"])
    assert teacher.parent == first and record["lines"] == len(_lines(distilled / "train.en.gz")) > 0
    out = capsys.readouterr().out
    assert f"distilled {record['lines']:,} pairs" in out and "Finished an ensemble of 2 members" in out

    # the distilled targets are the first member's own translations of those sources
    model, tokenizers, teacher_cfg = load_for_inference(teacher, "cpu", pack=True)
    sources, targets = _lines(distilled / "train.en.gz"), _lines(distilled / "train.de.gz")
    translator = Translator(model, tokenizers, teacher_cfg.decode, max_positions=teacher_cfg.model.max_positions)
    assert translator.translate(sources[:20]) == targets[:20]

    # member 2: original pairs + distilled ones (data.extra_train), member 1's tokenizer
    second = load_checkpoint(run / "member_2" / "checkpoints" / "last.pt")
    data = second["config"]["data"]
    assert data["train_prefix"] == "train" and data["extra_train"] == [str(distilled.resolve() / "train")]
    assert data["tokenizer"] == str(distilled.resolve() / "tokenizer")
    assert second["tokenizers"] == load_checkpoint(teacher)["tokenizers"]
    assert load_checkpoint(first / "last.pt")["config"]["data"]["tokenizer"] is None

    again = train(cfg)  # a rerun reuses the distillation and resumes (both members done)
    assert "distilling" not in capsys.readouterr().out and again.test


def test_the_distillation_comes_out_of_the_second_members_budget(tmp_path: Path) -> None:
    from mt.train.distill import Distilled, distilled_member
    from mt.train.members import member_configs

    configs = member_configs(_files_config(tmp_path, "train.max_time_minutes=112", "train.members=3"))
    distilled = Distilled(tmp_path / "distilled", seconds=150.0, lines=10, bleu=50.0)
    budgets = [distilled_member(c, distilled, pays_for_it=j == 0).train.max_time_minutes
               for j, c in enumerate(configs[1:])]
    assert configs[0].train.max_time_minutes == pytest.approx(112 / 3)
    assert budgets == pytest.approx([112 / 3 - 2.5, 112 / 3])


def test_distillation_needs_one_language_pair_but_no_particular_source(tmp_path: Path) -> None:
    from mt.train.members import member_configs

    needs = r"train.distill=true: .*one target language; data.pairs has 2 \(en-de,en-fr\).*train.distill=false"
    with pytest.raises(ConfigError, match=needs):
        member_configs(tiny_config(tmp_path, "train.members=2", "train.distill=true", "data.pairs=[en-de,en-fr]"))
    assert len(member_configs(tiny_config(tmp_path, "train.members=2", "train.distill=true"))) == 2  # the demo
    assert len(member_configs(tiny_config(tmp_path, "train.members=1", "train.distill=true",
                                          "data.pairs=[en-de,en-fr]"))) == 1


def _write_pairs(prefix: Path, pairs: list[tuple[str, str]]) -> None:
    prefix.parent.mkdir(parents=True, exist_ok=True)
    for lang, column in (("en", 0), ("de", 1)):
        with gzip.open(f"{prefix}.{lang}.gz", "wt", encoding="utf-8") as f:
            f.writelines(pair[column] + "\n" for pair in pairs)


def test_extra_training_files_follow_any_format_and_change_the_content_key(tmp_path: Path) -> None:
    from mt.data.sources import open_split

    corpus = tmp_path / "corpus"
    corpus.mkdir()
    (corpus / "train.tsv").write_text("one\teins\ntwo\tzwei\n")
    (corpus / "val.tsv").write_text("five\tfünf\n")
    _write_pairs(tmp_path / "distilled" / "train", [("three", "drei")])
    cfg = tiny_config(tmp_path, "data.source=files", f"data.dir={corpus}", "data.format=tsv").data
    plain = open_split(cfg, "train", tmp_path / "cache")
    extra = dataclasses.replace(cfg, extra_train=[str(tmp_path / "distilled" / "train")])
    both = open_split(extra, "train", tmp_path / "cache")
    assert both.key != plain.key and open_split(extra, "train", tmp_path / "cache").key == both.key
    assert open_split(extra, "valid", tmp_path / "cache").key == open_split(cfg, "valid", tmp_path / "cache").key
    rows = both.load()
    assert list(zip(rows["src"], rows["tgt"], strict=True)) == [("one", "eins"), ("two", "zwei"), ("three", "drei")]

    _write_pairs(tmp_path / "distilled" / "train", [("four", "vier")])  # other content, another key
    assert open_split(extra, "train", tmp_path / "cache").key != both.key
    missing = dataclasses.replace(cfg, extra_train=[str(tmp_path / "nowhere")])
    with pytest.raises(DataError, match=r"data.extra_train=\[.*nowhere\]: missing data file: .*nowhere.en"):
        open_split(missing, "train", tmp_path / "cache")
