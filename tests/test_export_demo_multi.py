"""End to end: the ``demo_multi`` preset (one model, en -> de and en -> fr) trained for 200 updates with
the export tests' demo model settings (~20 s on one thread), exported to CTranslate2 and Hugging Face;
each runtime's greedy output equals mt's for each target. By then ``>>de<<`` gives German number words
and ``>>fr<<`` French ones.

All three stop at one output limit (``MAX_LEN`` pieces, mt's ``max_len_a=0``), where a line runs that
far (4 and 11 of the 40 lines into de and fr); the others end with EOS.
"""

from __future__ import annotations

import ctranslate2
import pytest
import sentencepiece as spm
import torch
import transformers
from export_helpers import DEMO, demo_sources, mt_search
from helpers import tiny_config

from mt.data.languages import lang_tag, target_languages
from mt.data.tokenizer import EOS_ID, PAD_ID
from mt.export import export_ctranslate2, export_hf

pytestmark = pytest.mark.filterwarnings("ignore:Recommended. pip install sacremoses")
UPDATES = 200
LINES = demo_sources(40)
MAX_LEN = 40


@pytest.fixture(scope="module")
def trained(tmp_path_factory):
    """(checkpoint, target languages, mt's greedy output pieces per target)."""
    from mt.train.loop import train

    base = tmp_path_factory.mktemp("demo_multi")
    cfg = tiny_config(base, *DEMO, "experiment=demo_multi", f"train.max_updates={UPDATES}",
                      f"train.save_every={UPDATES}")
    train(cfg)
    ckpt = base / "run" / "checkpoints" / "last.pt"
    targets = target_languages(cfg.data)
    limit = {"max_len_a": 0.0, "max_len_b": MAX_LEN}
    ours = {lang: [h.tokens for h in mt_search(ckpt, LINES, lang, strategy="greedy", **limit)[0]] for lang in targets}
    assert len(targets) > 1 and ours[targets[0]] != ours[targets[1]]
    return ckpt, targets, ours


def test_ctranslate2_and_hf_greedy_equal_mt_for_each_target(trained, tmp_path):
    ckpt, targets, ours = trained
    export_ctranslate2(ckpt, tmp_path / "ct2")
    export_hf(ckpt, tmp_path / "hf")
    sp = spm.SentencePieceProcessor(model_file=str(tmp_path / "ct2" / "spm.model"))
    ct2 = ctranslate2.Translator(str(tmp_path / "ct2"), device="cpu", intra_threads=1)
    tokenizer = transformers.AutoTokenizer.from_pretrained(tmp_path / "hf")
    model = transformers.MarianMTModel.from_pretrained(tmp_path / "hf").eval()
    for lang in targets:
        sources = [[lang_tag(lang), *sp.encode(line, out_type=str)] for line in LINES]
        results = ct2.translate_batch(sources, beam_size=1, max_decoding_length=MAX_LEN)
        assert [[sp.piece_to_id(p) for p in r.hypotheses[0]] for r in results] == ours[lang], lang
        batch = tokenizer([f"{lang_tag(lang)} {line}" for line in LINES], return_tensors="pt", padding=True)
        with torch.inference_mode():
            rows = model.generate(**batch, num_beams=1, max_length=MAX_LEN + 2).tolist()
        hf = [row[1 : row.index(EOS_ID)] if EOS_ID in row else [t for t in row[1:] if t != PAD_ID] for row in rows]
        assert hf == ours[lang], lang
