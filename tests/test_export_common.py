"""mt.export.common: decode settings as one-number knobs, banned ids, position tables, output directories."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from helpers import tiny_config

from mt.data import Tokenizer, train_tokenizer
from mt.data.demo import demo_line, demo_numbers
from mt.export.common import (
    ExportError,
    banned_ids,
    position_table,
    prepare_output_dir,
    removed_on_failure,
    search_defaults,
)
from mt.model import build_model, sinusoid_table


def test_search_defaults_map_penalties_and_limits(tmp_path):
    cfg = tiny_config(tmp_path, "decode.length_penalty=length", "decode.alpha=1.0", "decode.max_len_a=0",
                      "decode.max_len_b=40")
    d = search_defaults(cfg)
    assert (d.beam_size, d.length_penalty, d.max_output_pieces, d.exact_length_limit, d.notes) == (4, 1.0, 40, True, ())

    gnmt = search_defaults(tiny_config(tmp_path, "decode.alpha=0.6"))  # gnmt, 1.0 * |src| + 50
    assert gnmt.length_penalty == 0.6 and not gnmt.exact_length_limit
    assert gnmt.max_output_pieces == 255  # capped at max_positions - 1 of transformer_tiny (256)
    assert any("GNMT" in note for note in gnmt.notes) and any("depends on the source" in n for n in gnmt.notes)

    greedy = search_defaults(tiny_config(tmp_path, "decode.strategy=greedy", "decode.length_penalty=none",
                                         "decode.max_len_a=0", "decode.max_len_b=600"))
    assert (greedy.beam_size, greedy.length_penalty, greedy.max_output_pieces, greedy.notes) == (1, 0.0, 255, ())
    assert search_defaults(tiny_config(tmp_path, "decode.strategy=sample")).beam_size == 1


def demo_tokenizer(vocab: int) -> Tokenizer:
    cfg = tiny_config(Path("/nonexistent"))
    lines = [demo_line(n)[1] for n in demo_numbers(cfg.data.demo)["train"]]
    return train_tokenizer(iter(lines), vocab)


def test_banned_ids_are_pad_bos_and_the_embedding_padding():
    tok = demo_tokenizer(90)
    assert (tok.vocab_size, tok.padded_vocab_size) == (90, 96)
    assert banned_ids(tok) == [0, 2, 90, 91, 92, 93, 94, 95]


def test_position_table_is_the_models_own(tmp_path):
    cfg = tiny_config(tmp_path)
    model = build_model(cfg.model, 40, 40)
    assert torch.equal(position_table(model.encoder.embedding), sinusoid_table(torch.arange(256), 32))
    learned = build_model(tiny_config(tmp_path, "model.positions=learned").model, 40, 40)
    table = position_table(learned.decoder.embedding)
    assert torch.equal(table, learned.decoder.embedding.positions.embedding.weight) and not table.requires_grad


def test_output_dir_is_replaced_only_with_force(tmp_path):
    out = tmp_path / "model"
    prepare_output_dir(out, force=False)  # absent: fine, parent made
    out.mkdir()
    (out / "old").write_text("x")
    with pytest.raises(ExportError, match="already exists; pass --force"):
        prepare_output_dir(out, force=False)
    assert (out / "old").exists()
    prepare_output_dir(out, force=True)
    assert not out.exists()


def test_a_failed_export_leaves_no_half_written_directory(tmp_path):
    out = tmp_path / "model"
    out.mkdir()
    with pytest.raises(RuntimeError, match="boom"), removed_on_failure(out):
        (out / "model.bin").write_text("partial")
        raise RuntimeError("boom")
    assert not out.exists()


@pytest.mark.parametrize(
    ("exporter", "override"),
    [
        *(("hf", o) for o in ("model.norm=rmsnorm", "model.positions=rope", "model.kv_heads=2", "model.qk_norm=true")),
        ("ctranslate2", "model.qk_norm=true"),  # the others CTranslate2 represents (test_export_ctranslate2)
    ],
)
def test_modern_options_are_refused(tmp_path, exporter, override):
    from mt.export.ctranslate2 import build_spec
    from mt.export.hf import check_supported

    cfg = tiny_config(tmp_path, override)
    with pytest.raises(ExportError, match=override):
        if exporter == "hf":
            check_supported(type("Source", (), {"cfg": cfg})())
        else:
            build_spec(build_model(cfg.model, 40, 40), cfg.model, ["x"] * 40, ["x"] * 40)
