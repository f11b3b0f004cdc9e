"""mt-translate with a model of several target languages: --target-lang checked and its tag put first.

The model (tests/export_helpers.multilingual_checkpoint) has random weights, so its outputs differ
between the tags; that is what shows the tag reaches the model, and the one a user asks for.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest
from export_helpers import MULTI_TARGETS, demo_sources, multilingual_checkpoint, untrained_checkpoint

from mt.checkpoint import load_for_inference
from mt.cli import translate as translate_cli
from mt.data import DataError
from mt.data.languages import lang_tag
from mt.decode import Translator

LINES = demo_sources(12)


@pytest.fixture(scope="module")
def multi(tmp_path_factory) -> Path:
    return multilingual_checkpoint(tmp_path_factory.mktemp("multi") / "multi.pt")


@pytest.fixture(scope="module")
def single(tmp_path_factory) -> Path:
    return untrained_checkpoint(tmp_path_factory.mktemp("single") / "single.pt")


def translator(ckpt: Path) -> Translator:
    model, tokenizers, cfg = load_for_inference(ckpt)
    return Translator(model, tokenizers, cfg.decode, max_positions=cfg.model.max_positions)


def run(ckpt: Path, tmp_path: Path, *flags: str) -> tuple[int, list[str]]:
    src = tmp_path / "in.en"
    src.write_text("\n".join(LINES) + "\n", encoding="utf-8")
    out = tmp_path / "out.txt"
    code = translate_cli.main(["--ckpt", str(ckpt), "--input", str(src), "--output", str(out), *flags])
    return code, out.read_text(encoding="utf-8").splitlines() if out.exists() else []


def test_the_tag_is_the_first_source_piece(multi: Path) -> None:
    t = translator(multi)
    for lang in MULTI_TARGETS:
        ids = t.encode_lines(["twenty-one", ""], lang)
        assert ids[0] == [t.tokenizers.src.piece_id(lang_tag(lang)), *t.tokenizers.src.encode("twenty-one")]
        assert ids[1] == []  # an empty line stays empty: no tag alone reaches the model


def test_target_lang_chooses_the_output(multi: Path, tmp_path: Path) -> None:
    t = translator(multi)
    outputs = {}
    for lang in MULTI_TARGETS:
        code, lines = run(multi, tmp_path, "--target-lang", lang)
        assert code == 0
        assert lines == t.translate(LINES, target_lang=lang)
        outputs[lang] = lines
    assert outputs["de"] != outputs["fr"]  # the tag reaches the model


def test_per_line_targets_equal_one_target_at_a_time(multi: Path) -> None:
    t = translator(multi)
    targets = [MULTI_TARGETS[i % 2] for i in range(len(LINES))]
    mixed = t.translate(LINES, target_lang=targets)
    alone = {lang: t.translate(LINES, target_lang=lang) for lang in MULTI_TARGETS}
    assert mixed == [alone[lang][i] for i, lang in enumerate(targets)]


def test_unknown_or_missing_target_is_one_line_error(multi: Path, tmp_path: Path, capsys) -> None:
    code, _ = run(multi, tmp_path, "--target-lang", "xx")
    err = capsys.readouterr().err
    assert code == 1
    assert "mt-translate: error: target language 'xx' is not one of this model's: de, fr" in err
    assert "Traceback" not in err
    code, _ = run(multi, tmp_path)
    err = capsys.readouterr().err
    assert code == 1
    assert "mt-translate: error: this model translates into de, fr: choose one (--target-lang)" in err
    assert not (tmp_path / "out.txt").exists()


def test_one_target_model_accepts_only_its_own(single: Path, tmp_path: Path, capsys) -> None:
    plain = run(single, tmp_path)
    assert plain[0] == 0
    assert run(single, tmp_path, "--target-lang", "de") == plain  # no tag: the same output
    code, _ = run(single, tmp_path, "--target-lang", "fr")
    assert code == 1
    assert "target language 'fr' is not one of this model's: de" in capsys.readouterr().err


def test_reject_counts_the_tag(multi: Path) -> None:
    model, tokenizers, cfg = load_for_inference(multi)
    pieces = len(tokenizers.src.encode(LINES[0]))
    reject = dataclasses.replace(cfg.decode, on_too_long="reject")
    t = Translator(model, tokenizers, reject, max_src_len=pieces)  # the line fits alone, not with its tag
    translate_cli.check_lengths(t, LINES[:1], "in.en")
    with pytest.raises(DataError, match=f"in.en:1: {pieces + 1} source pieces, more than the model's {pieces}"):
        translate_cli.check_lengths(t, LINES[:1], "in.en", target="fr")
