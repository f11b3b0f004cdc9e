"""Sequence-level knowledge distillation between members (Kim and Rush 2016): ``train.distill=true``.

Once the first member of ``train.members`` has chosen its checkpoint, that model translates the sources of
the training split with its own search settings (the Multi30k preset: beam 4) into
``<run_dir>/distilled/train.<src>.gz`` and ``train.<tgt>.gz``, beside a copy of its tokenizer
(``distilled/tokenizer``). Every later member trains on the original pairs, read from their own source and
format (parallel, TSV or JSONL files, a hub dataset), plus these as parallel files (``data.extra_train`` gains
``<run_dir>/distilled/train``: the training data's content key changes with them; ``data.tokenizer`` is the
first member's, so the members keep one vocabulary and decode as one ensemble). One language pair only: the
translations go into one target language. The translation's wall time comes out of the
second member's budget, so the command keeps its minutes. The directory is written whole or not at all
(a temporary directory renamed into place) and a rerun reuses it (``distill.json`` records the time).
"""

from __future__ import annotations

import dataclasses
import gzip
import json
import time
from dataclasses import dataclass
from pathlib import Path

import torch

from mt import checkpoint as ckpt
from mt.config import Config, ConfigError
from mt.data import prepare_data
from mt.data.binarize import atomic_dir
from mt.data.languages import data_pairs
from mt.decode import Translator
from mt.eval.scoring import bleu_and_chrf

RECORD = "distill.json"


@dataclass(frozen=True)
class Distilled:
    """A finished distillation: its directory (``train.<lang>.gz``, ``tokenizer/``) and what it cost."""

    directory: Path
    seconds: float
    lines: int
    bleu: float  # the translations against the training references

    @property
    def prefix(self) -> str:
        return str(self.directory.resolve() / "train")

    @property
    def tokenizer(self) -> str:
        return str(self.directory.resolve() / "tokenizer")


def check_distillable(cfg: Config) -> None:
    """``train.distill`` needs one language pair (any source and format: module doc)."""
    pairs = data_pairs(cfg.data)
    if len(pairs) > 1:
        raise ConfigError([
            f"train.distill=true: distillation translates into one target language; data.pairs has "
            f"{len(pairs)} ({','.join(p.name for p in pairs)}): train one pair, "
            f"or train the members without it: train.distill=false"
        ])


def distilled_member(member: Config, distilled: Distilled, *, pays_for_it: bool) -> Config:
    """``member`` training on its pairs plus ``distilled`` with the first member's tokenizer; the member
    that ``pays_for_it`` loses the distillation's minutes from its budget."""
    data = dataclasses.replace(
        member.data, extra_train=[*member.data.extra_train, distilled.prefix], tokenizer=distilled.tokenizer
    )
    budget = member.train.max_time_minutes
    if pays_for_it and budget > 0:
        budget = max(budget - distilled.seconds / 60, 1 / 60)
    return dataclasses.replace(member, data=data, train=dataclasses.replace(member.train, max_time_minutes=budget))


def distill_training_set(teacher: Path, cfg: Config, directory: Path, device: torch.device) -> Distilled:
    """``teacher``'s translations of the training sources of ``cfg`` into ``directory`` (module doc); an
    existing finished ``directory`` is reused."""
    if (directory / RECORD).is_file():
        return _read_record(directory)
    start = time.monotonic()
    train = prepare_data(cfg.data, splits=("train",)).splits["train"]
    sources, references = list(train.src_text), list(train.tgt_text)
    model, tokenizers, teacher_cfg = ckpt.load_for_inference(teacher, device, pack=True)
    print(f"\ndistilling: {teacher} translates the {len(sources):,} training sources "
          f"({teacher_cfg.decode.strategy}, beam {teacher_cfg.decode.beam_size})", flush=True)
    translator = Translator(model, tokenizers, teacher_cfg.decode, device,
                            max_positions=teacher_cfg.model.max_positions)
    hypotheses = translator.translate(sources, progress=cfg.train.progress)
    kept = [(s, h) for s, h in zip(sources, hypotheses, strict=True) if h.strip()]
    bleu = float(bleu_and_chrf(hypotheses, references)["bleu"])
    record = {"teacher": str(teacher), "lines": len(kept), "seconds": round(time.monotonic() - start, 1),
              "bleu_against_references": round(bleu, 2)}
    _write_directory(directory, cfg, kept, tokenizers, record)
    print(f"distilled {len(kept):,} pairs in {record['seconds']:.0f} s (BLEU {bleu:.2f} against the references) "
          f"-> {directory}", flush=True)
    return _read_record(directory)


def _write_directory(directory: Path, cfg: Config, pairs: list[tuple[str, str]], tokenizers, record: dict) -> None:
    with atomic_dir(directory) as tmp:
        langs = data_pairs(cfg.data)[0]  # the file names that data.extra_train reads (check_distillable: one)
        for lang, column in ((langs.src, 0), (langs.tgt, 1)):
            with gzip.open(tmp / f"train.{lang}.gz", "wt", encoding="utf-8", newline="\n") as f:
                f.writelines(pair[column] + "\n" for pair in pairs)
        tokenizers.save(tmp / "tokenizer")
        (tmp / RECORD).write_text(json.dumps(record, indent=2) + "\n")


def _read_record(directory: Path) -> Distilled:
    record = json.loads((directory / RECORD).read_text())
    return Distilled(directory, float(record["seconds"]), int(record["lines"]),
                     float(record["bleu_against_references"]))
