"""mt-export of a model of several target languages: the tags travel in the vocabulary, and each target's
greedy output in CTranslate2 and in Hugging Face's ``generate`` is mt's (``--target-lang``).

The model (tests/export_helpers.multilingual_checkpoint, en-de and en-fr) has random weights, whose
outputs differ between the tags; with a fixed output limit (it rarely says EOS) both runtimes stop where
mt does.
"""

from __future__ import annotations

import json

import ctranslate2
import pytest
import sentencepiece as spm
import torch
import transformers
from export_helpers import MULTI_TARGETS, demo_sources, mt_search, multilingual_checkpoint

from mt.checkpoint import load_for_inference
from mt.data.languages import lang_tag
from mt.data.tokenizer import BOS_ID, EOS_ID, PAD_ID
from mt.export import export_ctranslate2, export_hf

pytestmark = pytest.mark.filterwarnings("ignore:Recommended. pip install sacremoses")
LINES = demo_sources(16)
MAX_LEN = 12


@pytest.fixture(scope="module")
def ckpt(tmp_path_factory):
    path = tmp_path_factory.mktemp("export_multi") / "multi.pt"
    return multilingual_checkpoint(path, "decode.max_len_a=0", f"decode.max_len_b={MAX_LEN}")


@pytest.fixture(scope="module")
def mt_outputs(ckpt) -> dict[str, list[list[int]]]:
    """mt's greedy output pieces per target language."""
    outputs = {lang: [h.tokens for h in mt_search(ckpt, LINES, lang, strategy="greedy")[0]] for lang in MULTI_TARGETS}
    assert outputs["de"] != outputs["fr"]  # the tag reaches the model: equality below is per target
    return outputs


@pytest.fixture(scope="module")
def ct2_dir(ckpt, tmp_path_factory):
    out = tmp_path_factory.mktemp("export_multi_ct2") / "ct2"
    export_ctranslate2(ckpt, out)
    return out


@pytest.fixture(scope="module")
def hf_dir(ckpt, tmp_path_factory):
    out = tmp_path_factory.mktemp("export_multi_hf") / "hf"
    export_hf(ckpt, out)
    return out


def test_ctranslate2_greedy_equals_mt_for_each_target(ct2_dir, mt_outputs):
    sp = spm.SentencePieceProcessor(model_file=str(ct2_dir / "spm.model"))
    translator = ctranslate2.Translator(str(ct2_dir), device="cpu", intra_threads=1)
    for lang in MULTI_TARGETS:
        sources = [[lang_tag(lang), *sp.encode(line, out_type=str)] for line in LINES]
        results = translator.translate_batch(sources, beam_size=1, max_decoding_length=MAX_LEN)
        assert [[sp.piece_to_id(p) for p in r.hypotheses[0]] for r in results] == mt_outputs[lang]


def test_ctranslate2_vocabulary_and_readme_hold_the_tags(ct2_dir):
    vocabulary = json.loads((ct2_dir / "shared_vocabulary.json").read_text(encoding="utf-8"))
    assert {">>de<<", ">>fr<<"} <= set(vocabulary)
    readme = (ct2_dir / "README.md").read_text(encoding="utf-8")
    assert "Target languages: de, fr." in readme and "`>>de<<`, `>>fr<<`" in readme
    assert '[[">>fr<<"] + source_sp.encode(line, out_type=str) for line in lines]' in readme
    assert "(en -> de, en -> fr)" in readme


def test_marian_tokenizer_turns_a_leading_tag_into_its_piece(ckpt, hf_dir):
    tokenizer = transformers.AutoTokenizer.from_pretrained(hf_dir)
    vocab = json.loads((hf_dir / "vocab.json").read_text(encoding="utf-8"))
    _, tokenizers, _ = load_for_inference(ckpt)
    for lang in MULTI_TARGETS:
        tag = tokenizers.src.piece_id(lang_tag(lang))
        assert vocab[lang_tag(lang)] == tag
        for line in LINES:
            assert tokenizer(f"{lang_tag(lang)} {line}").input_ids == [tag, *tokenizers.src.encode(line), EOS_ID]
    readme = (hf_dir / "README.md").read_text(encoding="utf-8")
    assert "Target languages: de, fr." in readme and 'lines = [">>fr<< ..."]' in readme


def test_hf_greedy_generate_equals_mt_for_each_target(hf_dir, mt_outputs):
    tokenizer = transformers.AutoTokenizer.from_pretrained(hf_dir)
    model = transformers.MarianMTModel.from_pretrained(hf_dir).eval()
    for lang in MULTI_TARGETS:
        batch = tokenizer([f"{lang_tag(lang)} {line}" for line in LINES], return_tensors="pt", padding=True)
        with torch.inference_mode():
            rows = model.generate(**batch, num_beams=1).tolist()
        assert all(row[0] == BOS_ID for row in rows)
        theirs = [row[1 : row.index(EOS_ID)] if EOS_ID in row else [t for t in row[1:] if t != PAD_ID] for row in rows]
        assert theirs == mt_outputs[lang]
