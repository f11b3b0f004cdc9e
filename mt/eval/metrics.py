"""Corpus scores with sacreBLEU: BLEU, chrF and TER, each with its signature (what makes it comparable).

``score`` returns, per metric, ``{"name", "score", "signature", "text"}``; ``text`` is sacreBLEU's own
one-line summary (BLEU's includes the n-gram precisions, brevity penalty and length ratio). The
optional lowercased BLEU is still sacreBLEU on detokenized text, with the 13a tokenizer and
``lowercase=True``; it is labelled as such because papers often report case-insensitive tokenized BLEU.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from sacrebleu.metrics import BLEU, CHRF, TER

LOWERCASE_LABEL = "BLEU (lowercased, 13a tokenized; for comparison with papers)"


def _entry(name: str, metric: BLEU | CHRF | TER, hyps: Sequence[str], refs: Sequence[str]) -> dict[str, Any]:
    result = metric.corpus_score(list(hyps), [list(refs)])
    return {"name": name, "score": result.score, "signature": str(metric.get_signature()), "text": str(result)}


def score(hyps: Sequence[str], refs: Sequence[str], lowercase_tokenized: bool = False) -> dict[str, dict[str, Any]]:
    """sacreBLEU corpus BLEU, chrF and TER of ``hyps`` against one reference each.

    Returns ``{"bleu": {...}, "chrf": {...}, "ter": {...}}`` (plus ``"bleu_lowercase"`` when asked),
    each ``{"name": str, "score": float, "signature": str, "text": str}``.
    """
    if len(hyps) != len(refs):
        raise ValueError(f"{len(hyps)} hypotheses but {len(refs)} references")
    if not hyps:
        raise ValueError("nothing to score: no hypotheses")
    scores = {
        "bleu": _entry("BLEU", BLEU(), hyps, refs),
        "chrf": _entry("chrF", CHRF(), hyps, refs),
        "ter": _entry("TER", TER(), hyps, refs),
    }
    if lowercase_tokenized:
        scores["bleu_lowercase"] = _entry(LOWERCASE_LABEL, BLEU(lowercase=True, tokenize="13a"), hyps, refs)
    return scores
