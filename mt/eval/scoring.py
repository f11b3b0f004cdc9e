"""Translate a list of sources and score the output: what validation, the final test and eval share."""

from __future__ import annotations

from typing import Any

import torch

from mt.config import DecodeConfig
from mt.eval.metrics import score


def translate_and_score(
    model, tokenizers, decode_cfg: DecodeConfig, device: torch.device, max_positions: int,
    sources: list[str], refs: list[str], target_lang: str | None = None,
) -> tuple[list[str], dict[str, float | str]]:
    """Translate ``sources`` (into ``target_lang`` for a multilingual model) and score them against ``refs``:
    (hypotheses, BLEU, chrF, BLEU signature)."""
    from mt.decode import Translator

    translator = Translator(model, tokenizers, decode_cfg, device, max_positions=max_positions)
    hyps = translator.translate(sources, target_lang=target_lang)
    return hyps, bleu_and_chrf(hyps, refs)


def pair_key(metric: str, pair: str) -> str:
    """The name of one pair's score: ``bleu_en-fr``."""
    return f"{metric}_{pair}"


def mean_over_pairs(per_pair: dict[str, dict[str, Any]]) -> dict[str, Any]:
    """Scores of several language pairs as one flat dict: each numeric metric's mean over the pairs under
    its plain name (``bleu``: what choosing the best checkpoint compares), then every pair's own value
    (``bleu_en-de``, ``bleu_en-fr``, ...); strings (the BLEU signature) are the first pair's."""
    first = next(iter(per_pair.values()))
    numeric = [k for k, v in first.items() if isinstance(v, int | float) and not isinstance(v, bool)]
    merged: dict[str, Any] = {k: v for k, v in first.items() if isinstance(v, str)}
    merged.update({k: sum(float(s[k]) for s in per_pair.values()) / len(per_pair) for k in numeric})
    for pair, scores in per_pair.items():
        merged.update({pair_key(k, pair): scores[k] for k in numeric})
    return merged


def bleu_and_chrf(hyps: list[str], refs: list[str]) -> dict[str, float | str]:
    """sacreBLEU BLEU and chrF of ``hyps`` against ``refs``, with the BLEU signature."""
    scores = score(hyps, refs)
    return {"bleu": scores["bleu"]["score"], "chrf": scores["chrf"]["score"],
            "bleu_signature": scores["bleu"]["signature"]}
