"""The evaluation report: every field, the Markdown, the hypotheses file and an alignment PNG."""

from __future__ import annotations

import gzip
import json
from pathlib import Path

import pytest
import torch

from mt.config import DecodeConfig, ModelConfig
from mt.data import Tokenizers, train_tokenizer
from mt.decode import Translator
from mt.eval.metrics import score
from mt.eval.report import evaluate
from mt.model import build_model


def read(path: Path, n: int) -> list[str]:
    with gzip.open(path, "rt", encoding="utf-8") as f:
        return [next(f).rstrip("\n") for _ in range(n)]


def test_report_writes_every_field(tmp_path: Path, multi30k_dir: Path) -> None:
    en, de = read(multi30k_dir / "val.en.gz", 300), read(multi30k_dir / "val.de.gz", 300)
    tokenizer = train_tokenizer(iter(en + de), vocab_size=300)
    tokenizers = Tokenizers(tokenizer, tokenizer, joint=True)
    cfg = ModelConfig(encoder_layers=2, decoder_layers=2, d_model=32, d_ff=64, heads=4, dropout=0.0)
    model = build_model(cfg, tokenizer.padded_vocab_size, tokenizer.padded_vocab_size)
    decode = DecodeConfig(beam_size=2, max_len_a=0.0, max_len_b=8)
    translator = Translator(model, tokenizers, decode, "cpu", max_positions=cfg.max_positions)
    sources, refs = en[:12], de[:12]
    checkpoint = {"path": "runs/x/checkpoints/best.pt", "step": 1234, "config": {"model": {"d_model": 32}}}

    with pytest.warns(UserWarning, match="line 99"):
        report = evaluate(
            translator, sources, refs, out_dir=tmp_path, name="t", checkpoint=checkpoint,
            data={"src": "val.en", "ref": "val.de"}, align=[2, 99], n_examples=4,
        )

    saved = json.loads((tmp_path / "t.json").read_text(encoding="utf-8"))
    assert saved == json.loads(json.dumps(report))
    assert set(saved) >= {"name", "created", "checkpoint", "data", "decoding", "metrics", "speed", "examples"}
    assert saved["checkpoint"] == checkpoint and saved["data"]["sentences"] == 12
    assert saved["decoding"]["beam_size"] == 2 and saved["decoding"]["length_penalty"] == "gnmt"
    hyps = (tmp_path / "t.hyp.txt").read_text(encoding="utf-8").split("\n")[:-1]
    assert len(hyps) == 12
    expected = score(hyps, refs, lowercase_tokenized=True)
    for key in ("bleu", "chrf", "ter", "bleu_lowercase"):
        assert saved["metrics"][key]["score"] == expected[key]["score"]
        assert saved["metrics"][key]["signature"] == expected[key]["signature"]
    speed = saved["speed"]
    assert speed["sentences"] == 12 and speed["wall_s"] > 0 and speed["threads"] == torch.get_num_threads()
    assert speed["sentences_per_s"] > 0 and speed["tgt_tokens"] > 12 and speed["tgt_tokens_per_s"] > 0
    assert [e["line"] for e in saved["examples"]] == [1, 5, 8, 12]
    assert saved["examples"][0] == {"line": 1, "source": en[0], "reference": de[0], "hypothesis": hyps[0]}
    assert saved["alignments"] == [{"line": 2, "path": "t.align-2.png"}]  # line 99 is out of range
    assert (tmp_path / "t.align-2.png").read_bytes().startswith(b"\x89PNG")
    markdown = (tmp_path / "t.md").read_text(encoding="utf-8")
    for needle in ("## Scores", "nrefs:1", "for comparison with papers", "## Speed", "sentences/s",
                   "runs/x/checkpoints/best.pt", "step 1234", "![alignment line 2](t.align-2.png)", en[0]):
        assert needle in markdown
