"""Translate a list of sources and score the output: what validation, the final test and eval share."""

from __future__ import annotations

import torch

from mt.config import DecodeConfig
from mt.eval.metrics import score


def translate_and_score(
    model, tokenizers, decode_cfg: DecodeConfig, device: torch.device, max_positions: int,
    sources: list[str], refs: list[str],
) -> tuple[list[str], dict[str, float | str]]:
    """Translate ``sources`` and score them against ``refs``: (hypotheses, BLEU, chrF, BLEU signature)."""
    from mt.decode import Translator

    translator = Translator(model, tokenizers, decode_cfg, device, max_positions=max_positions)
    hyps = translator.translate(sources)
    return hyps, bleu_and_chrf(hyps, refs)


def bleu_and_chrf(hyps: list[str], refs: list[str]) -> dict[str, float | str]:
    """sacreBLEU BLEU and chrF of ``hyps`` against ``refs``, with the BLEU signature."""
    scores = score(hyps, refs)
    return {"bleu": scores["bleu"]["score"], "chrf": scores["chrf"]["score"],
            "bleu_signature": scores["bleu"]["signature"]}
