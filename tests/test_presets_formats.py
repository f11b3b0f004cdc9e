"""Every preset (``conf/experiment/*.yaml``) trains on local files in each data format: parallel, TSV, JSONL.

A preset brings what each data format must carry through: two members with distillation (``multi30k_en_de``),
several language pairs (``demo_multi``, ``multi30k_en_multi``), a hub source (``wmt14_*``, read here from local
files: the tests have no network). Each run keeps the preset and shrinks the model (d 32, 1+1 layers) and the run
(2 updates, no BLEU, no test) to seconds, on 60 training lines of Multi30k (two training prefixes, ``train`` and
``train2``, read as one split) with 8 valid and 8 test lines. The presets share one data cache per format, so a
tokenizer and its binarized splits are made once. ``test_multi30k_en_de_distills_from_any_source`` is the
regression test of ``make train EXP=multi30k_en_de ARGS="data.format=tsv"`` (and jsonl, and a hub dataset),
which once stopped with "train.distill=true: distillation writes parallel text files...".
"""

from __future__ import annotations

import gzip
import json
from dataclasses import dataclass
from pathlib import Path

import datasets
import pytest
from helpers import CONF_DIR, compose_config

from mt.checkpoint import load_checkpoint
from mt.config import Config, to_config
from mt.data.languages import data_pairs
from mt.data.sources import open_split
from mt.train.loop import train
from mt.train.summary import RunSummary

PRESETS = sorted(p.stem for p in (Path(CONF_DIR) / "experiment").glob("*.yaml"))
FORMATS = ("parallel", "tsv", "jsonl")
LANGS = ("en", "de", "fr", "cs")  # every language of Multi30k: the multilingual presets' targets
SPLITS = {"train": ("train", 0, 30), "train2": ("train", 30, 60), "val": ("val", 0, 8),
          "test": ("test_2016_flickr", 0, 8)}  # prefix: (Multi30k's file, first line, end)
# finetune goes on from a checkpoint (train.init_from=REQUIRED): tests/test_train_finetune.py trains it. TSV lines
# are src<TAB>tgt without language names, so a preset of several pairs (each read from PREFIX.tsv) takes no TSV.
FROM_A_CHECKPOINT = {"finetune"}
SEVERAL_PAIRS = {"demo_multi", "multi30k_en_multi"}
COMBINATIONS = [(preset, fmt) for preset in PRESETS if preset not in FROM_A_CHECKPOINT for fmt in FORMATS
                if not (fmt == "tsv" and preset in SEVERAL_PAIRS)]

TINY_RUN = [
    "model.d_model=32", "model.d_ff=64", "model.heads=4", "model.encoder_layers=1", "model.decoder_layers=1",
    "data.train_prefix=[train,train2]", "data.valid_prefix=val", "data.test_prefix=test",
    "data.vocab_size=200", "data.max_len=128", "data.num_workers=1",
    "train.max_updates=2", "train.validate_every=2", "train.save_every=2", "train.keep_last=2",
    "train.average_last=0", "train.valid_bleu=false", "train.test_at_end=false", "train.progress=false",
    "train.tensorboard=false", "train.threads=1", "train.log_every=1",
    "decode.max_len_a=0", "decode.max_len_b=8",  # distillation's beam search: 8 pieces a line
]


def _read_gz(path: Path) -> list[str]:
    with gzip.open(path, "rt", encoding="utf-8") as f:
        return f.read().splitlines()


def _head(path: Path, start: int, end: int) -> list[str]:
    return _read_gz(path)[start:end]


def _write_corpus(multi30k: Path, out: Path, fmt: str) -> Path:
    """The tiny corpus in ``fmt`` under ``out``: every language (parallel, JSONL) or en-de (TSV)."""
    out.mkdir(parents=True)
    for prefix, (name, start, end) in SPLITS.items():
        lines = {lang: _head(multi30k / f"{name}.{lang}.gz", start, end) for lang in LANGS}
        rows = [dict(zip(LANGS, row, strict=True)) for row in zip(*lines.values(), strict=True)]
        if fmt == "parallel":
            for lang in LANGS:
                (out / f"{prefix}.{lang}").write_text("".join(f"{line}\n" for line in lines[lang]), encoding="utf-8")
        elif fmt == "tsv":
            (out / f"{prefix}.tsv").write_text("".join(f"{r['en']}\t{r['de']}\n" for r in rows), encoding="utf-8")
        else:
            text = "".join(json.dumps(r, ensure_ascii=False) + "\n" for r in rows)
            (out / f"{prefix}.jsonl").write_text(text, encoding="utf-8")
    return out


def _write_hub_dataset(multi30k: Path, out: Path) -> Path:
    """The same corpus as a ``save_to_disk`` directory of ``translation`` rows (what ``data.hub.name`` reads)."""
    splits = {"train": [("train", 0, 60)], "validation": [SPLITS["val"]], "test": [SPLITS["test"]]}
    parts = {}
    for split, ranges in splits.items():
        rows = [{"en": en, "de": de} for name, start, end in ranges
                for en, de in zip(_head(multi30k / f"{name}.en.gz", start, end),
                                  _head(multi30k / f"{name}.de.gz", start, end), strict=True)]
        parts[split] = datasets.Dataset.from_dict({"translation": rows})
    datasets.DatasetDict(parts).save_to_disk(str(out))
    return out


@pytest.fixture(scope="module")
def corpora(multi30k_dir: Path, tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """Per data format, the directory of its tiny corpus (and ``hub``: a ``save_to_disk`` directory)."""
    root = tmp_path_factory.mktemp("corpora")
    found = {fmt: _write_corpus(multi30k_dir, root / fmt, fmt) for fmt in FORMATS}
    found["hub"] = _write_hub_dataset(multi30k_dir, root / "hub")
    return found


@dataclass(frozen=True)
class Run:
    cfg: Config
    summary: RunSummary


_RUNS: dict[str, Run] = {}  # by run directory: the matrix and the regression test share a run


def _data_overrides(corpora: dict[str, Path], source: str) -> list[str]:
    """Local data for every preset: ``source`` is a format of files, or ``hub`` (a local dataset directory)."""
    if source == "hub":
        return ["data.source=hub", f"data.hub.name={corpora['hub']}"]
    return ["data.source=files", f"data.dir={corpora[source]}", f"data.format={source}"]


def _preset(preset: str, source: str, corpora: dict[str, Path], root: Path) -> Config:
    return compose_config([f"experiment={preset}", *TINY_RUN, *_data_overrides(corpora, source),
                           f"data.cache_dir={root / 'cache' / source}", f"train.run_dir={root / preset / source}"])


def _trained(cfg: Config) -> Run:
    """``cfg`` trained once (the matrix and the regression test share the multi30k_en_de runs)."""
    if cfg.train.run_dir not in _RUNS:
        _RUNS[cfg.train.run_dir] = Run(cfg, train(cfg))
    return _RUNS[cfg.train.run_dir]


@pytest.fixture(scope="module")
def runs_root(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("presets")


def _check_distilled(run: Run) -> None:
    """Both members trained; the second read the original pairs in their own source and format, then the
    first member's translations as parallel files, with the first member's tokenizer."""
    run_dir = Path(run.cfg.train.run_dir)
    assert run.summary.reason == "members" and (run_dir / "ensemble.json").is_file()
    distilled = run_dir / "distilled"
    record = json.loads((distilled / "distill.json").read_text())
    assert Path(record["teacher"]).parent == run_dir / "member_1" / "checkpoints" and record["lines"] > 0
    second = load_checkpoint(run_dir / "member_2" / "checkpoints" / "last.pt")
    data = to_config(second["config"]).data
    assert (data.source, data.format, data.train_prefix) == (run.cfg.data.source, run.cfg.data.format,
                                                              run.cfg.data.train_prefix)
    assert data.extra_train == [str(distilled.resolve() / "train")]
    assert data.tokenizer == str(distilled.resolve() / "tokenizer")
    raw, own = (open_split(d, "train", Path(d.cache_dir)) for d in (data, run.cfg.data))
    assert raw.key != own.key  # its cache entries are not the first member's
    rows, original = raw.load(), len(own.load())
    distilled_pairs = [_read_gz(distilled / f"train.{lang}.gz") for lang in ("en", "de")]
    assert original == 60 and len(distilled_pairs[0]) == record["lines"]
    assert [rows["src"][original:], rows["tgt"][original:]] == distilled_pairs


def test_the_presets_left_out_of_tsv_are_those_of_several_pairs() -> None:
    several = {p for p in PRESETS if p not in FROM_A_CHECKPOINT
               and len(data_pairs(compose_config([f"experiment={p}"]).data)) > 1}
    assert several == SEVERAL_PAIRS


@pytest.mark.parametrize(("preset", "fmt"), COMBINATIONS)
def test_every_preset_trains_on_every_data_format(preset: str, fmt: str, corpora, runs_root: Path) -> None:
    cfg = _preset(preset, fmt, corpora, runs_root)
    run = _trained(cfg)
    if cfg.train.distill and cfg.train.members > 1:
        _check_distilled(run)
    elif cfg.train.members > 1:
        assert run.summary.reason == "members" and (Path(cfg.train.run_dir) / "ensemble.json").is_file()
    else:
        assert run.summary.reason == "max_updates" and run.summary.best_checkpoint.is_file()


@pytest.mark.parametrize("source", ["tsv", "jsonl", "hub"])
def test_multi30k_en_de_distills_from_any_source(source: str, corpora, runs_root: Path) -> None:
    run = _trained(_preset("multi30k_en_de", source, corpora, runs_root))
    assert run.cfg.train.members == 2 and run.cfg.train.distill  # the preset's, unchanged
    _check_distilled(run)
