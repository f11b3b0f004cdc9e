"""mt-export of imported MarianMTModel checkpoints (SiLU, Marian's sinusoids, a logits bias with -inf rows):
CTranslate2 and Hugging Face compute and generate what mt does, and the Hugging Face directory imports back."""

from __future__ import annotations

import json

import ctranslate2
import pytest
import sentencepiece as spm
import torch
import transformers
from export_helpers import compare_forward, mt_search
from pretrained_helpers import captions, marian_directory
from test_export_ctranslate2 import ct2_log_probs, mt_log_probs

from mt.checkpoint import load_for_inference, load_tokenizers_and_config
from mt.cli.export import main
from mt.data.tokenizer import BOS_ID, EOS_ID
from mt.pretrained import import_hf

pytestmark = pytest.mark.filterwarnings("ignore:Recommended. pip install sacremoses")

MAX_LEN = 30  # random models often repeat themselves up to the limit: both stop there with the same pieces
VARIANTS = {
    "shared_swish": ({}, True),
    "separate_unscaled_extra_rows_untied": ({"separate_vocabs": True, "extra_rows": 3, "tied": False}, False),
}


@pytest.fixture(scope="module", params=sorted(VARIANTS))
def imported(request, tmp_path_factory, multi30k_dir):
    """(Marian directory, its import) of a tiny random swish model whose final_logits_bias is random."""
    base = tmp_path_factory.mktemp(request.param)
    options, scale = VARIANTS[request.param]
    directory = marian_directory(base / "hf", multi30k_dir, layers=1, **options)
    config = json.loads((directory / "config.json").read_text())
    (directory / "config.json").write_text(json.dumps(config | {"scale_embedding": scale}))
    return directory, import_hf(directory, base / "model.pt").out


@pytest.fixture(scope="module")
def sources(multi30k_dir):
    return captions(multi30k_dir, "en", 2030)[2000:]  # not the tokenizers' training lines


def test_imported_checkpoint_has_the_marian_options(imported):
    directory, ckpt = imported
    model, _, cfg = load_for_inference(ckpt)
    scale = json.loads((directory / "config.json").read_text())["scale_embedding"]
    assert (cfg.model.activation, cfg.model.sinusoid, cfg.model.scale_embeddings) == ("silu", "marian", scale)
    bias = model.decoder.logits_bias
    assert cfg.model.logits_bias and bias[BOS_ID] == float("-inf")  # <s> copies Marian's <pad> row, masked
    assert int(torch.isfinite(bias).sum()) == bias.numel() - 1 and float(bias[torch.isfinite(bias)].std()) > 0.5


def ct2_greedy(directory, tokenizers, lines: list[str]) -> list[list[int]]:
    """CTranslate2's greedy outputs for raw SentencePiece pieces, as mt ids."""
    sp = spm.SentencePieceProcessor(model_file=str(directory / "src.model"))
    translator = ctranslate2.Translator(str(directory), device="cpu", intra_threads=1)
    results = translator.translate_batch([sp.encode(line, out_type=str) for line in lines], beam_size=1,
                                         max_decoding_length=MAX_LEN)
    return [[tokenizers.tgt.piece_id(piece) for piece in r.hypotheses[0]] for r in results]


def test_ctranslate2_greedy_equals_mt(imported, sources, tmp_path):
    """Swish, Marian's sinusoids, (un)scaled embeddings and the logits bias (-inf rows at -1e4) are
    CTranslate2's: greedy outputs token for token, per-token log-probs within 1e-4."""
    _, ckpt = imported
    assert main(["--to", "ctranslate2", "--ckpt", str(ckpt), "--out", str(tmp_path / "ct2")]) == 0
    _, tokenizers, _ = load_for_inference(ckpt)
    # min_len=1 (mt's default): CTranslate2's search never ends before the first piece either
    ours, _ = mt_search(ckpt, sources, strategy="greedy", max_len_a=0, max_len_b=MAX_LEN, min_len=1)
    theirs = ct2_greedy(tmp_path / "ct2", tokenizers, sources)
    assert [h.tokens for h in ours] == theirs
    assert len({tuple(t) for t in theirs}) > len(sources) // 2  # outputs follow their sources
    src_ids = [tokenizers.src.encode(line) for line in sources[:8]]
    tgt_ids = [h.tokens[: 3 + i] for i, h in enumerate(ours[:8])]
    for a, b in zip(mt_log_probs(ckpt, src_ids, tgt_ids), ct2_log_probs(tmp_path / "ct2", src_ids, tgt_ids),
                    strict=True):
        assert torch.allclose(torch.tensor(a), torch.tensor(b), atol=1e-4)


@pytest.fixture(scope="module")
def exported_hf(imported, tmp_path_factory):
    out = tmp_path_factory.mktemp("hf_export") / "model"
    assert main(["--to", "hf", "--ckpt", str(imported[1]), "--out", str(out)]) == 0
    return out


def test_hf_directory_holds_the_marian_options_and_the_imported_tokenizer(imported, exported_hf):
    directory, ckpt = imported
    tokenizers, cfg = load_tokenizers_and_config(ckpt)
    config = json.loads((exported_hf / "config.json").read_text())
    assert (config["activation_function"], config["scale_embedding"]) == ("swish", cfg.model.scale_embeddings)
    separate = (directory / "target_vocab.json").exists()
    assert json.loads((exported_hf / "tokenizer_config.json").read_text())["separate_vocabs"] == separate
    assert (exported_hf / "target_vocab.json").exists() == separate  # a shared vocabulary stays one vocab.json
    vocab = json.loads((exported_hf / "vocab.json").read_text())
    assert sorted(vocab, key=vocab.__getitem__) == tokenizers.src.vocab  # mt's order
    assert (exported_hf / "source.spm").read_bytes() == (directory / "source.spm").read_bytes()
    assert (exported_hf / "target.spm").read_bytes() == (directory / "target.spm").read_bytes()
    marian = transformers.MarianMTModel.from_pretrained(exported_hf)
    bias = marian.final_logits_bias[0]
    assert bias[BOS_ID] == float("-inf") and bool(torch.isfinite(bias[EOS_ID]))
    assert "sinusoidal positions (marian)" in (exported_hf / "README.md").read_text()


def test_hf_logits_equal_mt(imported, exported_hf, sources):
    assert bool(compare_forward(imported[1], exported_hf, sources[:12]).isinf().any())  # the masked <s> row


def test_hf_greedy_generate_equals_mt(imported, exported_hf, sources):
    """generation_config.json suppresses PAD, BOS (its -inf bias too) and the rows past the vocabulary."""
    _, ckpt = imported
    tokenizer = transformers.AutoTokenizer.from_pretrained(exported_hf)
    marian = transformers.MarianMTModel.from_pretrained(exported_hf).eval()
    batch = tokenizer(sources, return_tensors="pt", padding=True)
    with torch.inference_mode():
        rows = marian.generate(**batch, num_beams=1, max_length=MAX_LEN + 2).tolist()
    theirs = [row[1 : row.index(EOS_ID)] if EOS_ID in row[1:] else row[1:] for row in rows]
    ours, _ = mt_search(ckpt, sources, strategy="greedy", max_len_a=0, max_len_b=MAX_LEN, min_len=0)
    assert [h.tokens for h in ours] == theirs


def test_hf_export_imports_back_to_the_same_model(imported, exported_hf, sources, tmp_path):
    _, ckpt = imported
    again = import_hf(exported_hf, tmp_path / "again.pt").out
    (first_tok, first), (second_tok, second) = load_tokenizers_and_config(ckpt), load_tokenizers_and_config(again)
    for option in ("activation", "sinusoid", "scale_embeddings", "logits_bias", "share_all_embeddings", "d_model"):
        assert getattr(second.model, option) == getattr(first.model, option), option
    assert second_tok.src.vocab == first_tok.src.vocab and second_tok.tgt.vocab == first_tok.tgt.vocab
    assert second_tok.tgt.padded_vocab_size == first_tok.tgt.padded_vocab_size
    options = dict(strategy="greedy", max_len_a=0, max_len_b=MAX_LEN, min_len=0)
    ours, _ = mt_search(ckpt, sources, **options)
    theirs, _ = mt_search(again, sources, **options)
    assert [h.tokens for h in theirs] == [h.tokens for h in ours]

