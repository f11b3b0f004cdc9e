"""Validation: teacher-forced loss on the valid split and sacreBLEU of decoded output."""

from __future__ import annotations

import dataclasses
import math
from typing import TYPE_CHECKING

import torch

from mt.data import PAD_ID, TokenBatchSampler, collate
from mt.eval.scoring import translate_and_score
from mt.train.loss import label_smoothed_nll_loss

if TYPE_CHECKING:
    from mt.train.trainer import Trainer


@torch.inference_mode()
def valid_loss(trainer: Trainer) -> dict[str, float]:
    """Smoothed loss, NLL (bits per token) and perplexity over the whole valid split."""
    split = trainer.data.splits["valid"]
    cfg = trainer.cfg
    sampler = TokenBatchSampler(
        split.src_lens, split.tgt_lens, cfg.data.max_tokens, seed=0, shuffle=False,
        pad_to_multiple=cfg.data.pad_to_multiple,
    )
    model = trainer.model
    model.eval()
    loss_sum = nll_sum = ntokens = 0.0
    for indices in sampler.batches(0):
        batch = collate(split, indices, cfg.data.pad_to_multiple).to(trainer.device)
        logits = model(batch.src, batch.src_pad_mask, batch.tgt_in)  # (B, T, V)
        loss, nll = label_smoothed_nll_loss(logits, batch.tgt_out, cfg.optim.label_smoothing, PAD_ID)
        loss_sum, nll_sum, ntokens = loss_sum + float(loss), nll_sum + float(nll), ntokens + batch.ntokens
    ntokens = max(ntokens, 1.0)
    nll_bits = nll_sum / ntokens / math.log(2)
    return {"loss": loss_sum / ntokens / math.log(2), "nll_loss": nll_bits, "ppl": 2**nll_bits}


def valid_bleu(trainer: Trainer) -> dict[str, float | str]:
    """Decode the valid sources (greedy by default) and score them with sacreBLEU and chrF."""
    tc = trainer.cfg.train
    split = trainer.data.splits["valid"]
    n = len(split) if tc.valid_bleu_max_sentences <= 0 else min(len(split), tc.valid_bleu_max_sentences)
    decode_cfg = dataclasses.replace(
        trainer.cfg.decode,
        strategy="greedy" if tc.valid_beam_size <= 1 else "beam",
        beam_size=max(tc.valid_beam_size, 1),
        nbest=1,
    )
    _, scores = translate_and_score(
        trainer.model, trainer.tokenizers, decode_cfg, trainer.device, trainer.cfg.model.max_positions,
        list(split.src_text[:n]), list(split.tgt_text[:n]),
    )
    return scores


def validate(trainer: Trainer) -> dict[str, float | str]:
    scores: dict[str, float | str] = dict(valid_loss(trainer))
    if trainer.cfg.train.valid_bleu:
        scores.update(valid_bleu(trainer))
    trainer.model.train()
    return scores
