"""Validation: teacher-forced loss on the valid split and sacreBLEU of decoded output.

Every function takes the model, the split and scalars (or a ``DecodeConfig``), so the same code
scores a model in training, a checkpoint at the end of a run, or anything a test builds.
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass

import torch
from torch import nn

from mt.config import Config, DecodeConfig
from mt.data import PAD_ID, TokenBatchSampler, TokenizedSplit, Tokenizers, collate
from mt.eval.scoring import translate_and_score
from mt.train.loss import label_smoothed_nll_loss


@dataclass(frozen=True)
class ValidationSettings:
    """How a run validates: loss batching and smoothing, and whether and how it decodes for BLEU."""

    max_tokens: int
    pad_to_multiple: int
    label_smoothing: float
    bleu: bool  # decode and score with sacreBLEU (else loss only)
    decode: DecodeConfig  # the decoding used for BLEU
    max_positions: int
    max_sentences: int = 0  # BLEU on the first N valid sentences; 0 = all

    @classmethod
    def from_config(cls, cfg: Config) -> ValidationSettings:
        tc = cfg.train
        return cls(
            max_tokens=cfg.data.max_tokens, pad_to_multiple=cfg.data.pad_to_multiple,
            label_smoothing=cfg.optim.label_smoothing, bleu=tc.valid_bleu,
            decode=validation_decode_config(cfg.decode, tc.valid_beam_size),
            max_positions=cfg.model.max_positions, max_sentences=tc.valid_bleu_max_sentences,
        )


def validation_decode_config(decode: DecodeConfig, beam_size: int) -> DecodeConfig:
    """Greedy for ``beam_size <= 1`` (fast), else beam search with the run's other decode settings."""
    return dataclasses.replace(
        decode, strategy="greedy" if beam_size <= 1 else "beam", beam_size=max(beam_size, 1), nbest=1
    )


@torch.inference_mode()
def valid_loss(
    model: nn.Module, split: TokenizedSplit, device: torch.device, *,
    max_tokens: int, pad_to_multiple: int = 8, label_smoothing: float = 0.0,
) -> dict[str, float]:
    """Smoothed loss, NLL (bits per token) and perplexity over the whole ``split``; leaves ``model`` in eval mode."""
    sampler = TokenBatchSampler(
        split.src_lens, split.tgt_lens, max_tokens, seed=0, shuffle=False, pad_to_multiple=pad_to_multiple,
    )
    model.eval()
    loss_sum = nll_sum = ntokens = 0.0
    for indices in sampler.batches(0):
        batch = collate(split, indices, pad_to_multiple).to(device)
        logits = model(batch.src, batch.src_pad_mask, batch.tgt_in)  # (B, T, V)
        loss, nll = label_smoothed_nll_loss(logits, batch.tgt_out, label_smoothing, PAD_ID)
        loss_sum, nll_sum, ntokens = loss_sum + float(loss), nll_sum + float(nll), ntokens + batch.ntokens
    ntokens = max(ntokens, 1.0)
    nll_bits = nll_sum / ntokens / math.log(2)
    return {"loss": loss_sum / ntokens / math.log(2), "nll_loss": nll_bits, "ppl": 2**nll_bits}


def valid_bleu(
    model: nn.Module, tokenizers: Tokenizers, split: TokenizedSplit, decode_cfg: DecodeConfig, device: torch.device,
    *, max_positions: int, max_sentences: int = 0,
) -> dict[str, float | str]:
    """Decode the sources of ``split`` (the first ``max_sentences``; 0 = all) and score them: BLEU, chrF."""
    n = len(split) if max_sentences <= 0 else min(len(split), max_sentences)
    _, scores = translate_and_score(
        model, tokenizers, decode_cfg, device, max_positions, list(split.src_text[:n]), list(split.tgt_text[:n]),
    )
    return scores


def validate(
    model: nn.Module, tokenizers: Tokenizers, split: TokenizedSplit, settings: ValidationSettings,
    device: torch.device,
) -> dict[str, float | str]:
    """Loss and (when ``settings.bleu``) BLEU scores of ``model`` on ``split``; the model is back in train mode."""
    scores: dict[str, float | str] = dict(valid_loss(
        model, split, device, max_tokens=settings.max_tokens, pad_to_multiple=settings.pad_to_multiple,
        label_smoothing=settings.label_smoothing,
    ))
    if settings.bleu:
        scores.update(valid_bleu(model, tokenizers, split, settings.decode, device,
                                 max_positions=settings.max_positions, max_sentences=settings.max_sentences))
    model.train()
    return scores
