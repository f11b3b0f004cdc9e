"""Metrics equal sacreBLEU called directly, and carry their signatures."""

from __future__ import annotations

import pytest
import sacrebleu

from mt.eval.metrics import LOWERCASE_LABEL, score

HYPS = ["The cat sat on the mat.", "A dog runs in the park!", "Hello world"]
REFS = ["The cat is sitting on the mat.", "a dog is running in the park!", "Hello, World"]


def test_scores_match_sacrebleu() -> None:
    result = score(HYPS, REFS, lowercase_tokenized=True)
    assert result["bleu"]["score"] == pytest.approx(sacrebleu.corpus_bleu(HYPS, [REFS]).score)
    assert result["chrf"]["score"] == pytest.approx(sacrebleu.corpus_chrf(HYPS, [REFS]).score)
    assert result["ter"]["score"] == pytest.approx(sacrebleu.corpus_ter(HYPS, [REFS]).score)
    lower = sacrebleu.corpus_bleu(HYPS, [REFS], lowercase=True, tokenize="13a").score
    assert result["bleu_lowercase"]["score"] == pytest.approx(lower)
    assert result["bleu_lowercase"]["name"] == LOWERCASE_LABEL
    assert lower > result["bleu"]["score"]  # "a dog" vs "A dog", "World": case matters here


def test_signatures_and_perfect_score() -> None:
    result = score(REFS, REFS)
    assert set(result) == {"bleu", "chrf", "ter"}
    assert result["bleu"]["score"] == pytest.approx(100.0) and result["ter"]["score"] == pytest.approx(0.0)
    assert result["bleu"]["signature"].startswith("nrefs:1|case:mixed|eff:no|tok:13a")
    assert "chrF2" in result["chrf"]["signature"] or "nc:6" in result["chrf"]["signature"]
    assert result["bleu"]["text"].startswith("BLEU = 100.00")


def test_mismatched_lengths_fail() -> None:
    with pytest.raises(ValueError, match="2 hypotheses but 3 references"):
        score(HYPS[:2], REFS)
