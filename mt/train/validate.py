"""Validation: teacher-forced loss on the valid split and sacreBLEU of decoded output.

Every function takes the model, the split and scalars (or a ``DecodeConfig``), so the same code
scores a model in training, a checkpoint at the end of a run, or anything a test builds. Under DDP
every rank calls them with its ``DistInfo``: the valid set is sharded over ranks (loss batches and
BLEU sentences), so no rank idles in a collective while rank 0 validates alone.

With several language pairs each pair's examples are validated on their own (a multilingual model is
asked for the pair's target language) and the scores are ``mean_over_pairs``: ``bleu``, ``loss``, ...
are means over the pairs, ``bleu_en-fr``, ``loss_en-fr``, ... each pair's own.
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass

import torch
from torch import nn

from mt.config import Config, DecodeConfig
from mt.data import PAD_ID, TokenBatchSampler, TokenizedSplit, Tokenizers, collate
from mt.data.languages import LanguagePair, data_pairs, is_multilingual
from mt.decode import Translator
from mt.eval.scoring import bleu_and_chrf, mean_over_pairs
from mt.train.distributed import DistInfo, all_gather_objects, all_reduce_sum, broadcast_object
from mt.train.loss import label_smoothed_nll_loss, live_classes

SINGLE = DistInfo()  # one process: no collectives


@dataclass(frozen=True)
class ValidationSettings:
    """How a run validates: loss batching and smoothing, and whether and how it decodes for BLEU."""

    max_tokens: int
    pad_to_multiple: int
    label_smoothing: float
    bleu: bool  # decode and score with sacreBLEU (else loss only)
    decode: DecodeConfig  # the decoding used for BLEU
    max_positions: int
    max_sentences: int = 0  # BLEU on the first N valid sentences (of each pair); 0 = all
    pairs: tuple[LanguagePair, ...] = ()  # several: validated pair by pair (index = the split's ``pairs``)
    multilingual: bool = False  # sources carry a target tag: decode pair i into pairs[i].tgt

    @classmethod
    def from_config(cls, cfg: Config) -> ValidationSettings:
        tc = cfg.train
        return cls(
            max_tokens=cfg.data.max_tokens, pad_to_multiple=cfg.data.pad_to_multiple,
            label_smoothing=cfg.optim.label_smoothing, bleu=tc.valid_bleu,
            decode=validation_decode_config(cfg.decode, tc.valid_beam_size),
            max_positions=cfg.model.max_positions, max_sentences=tc.valid_bleu_max_sentences,
            pairs=tuple(data_pairs(cfg.data)), multilingual=is_multilingual(cfg.data),
        )

    def target_lang(self, pair: LanguagePair) -> str | None:
        """What to ask the model for when decoding ``pair``: its target for a multilingual model, else None."""
        return pair.tgt if self.multilingual else None


def validation_decode_config(decode: DecodeConfig, beam_size: int) -> DecodeConfig:
    """Greedy for ``beam_size <= 1`` (fast), else beam search with the run's other decode settings."""
    return dataclasses.replace(
        decode, strategy="greedy" if beam_size <= 1 else "beam", beam_size=max(beam_size, 1), nbest=1
    )


@torch.inference_mode()
def valid_loss(
    model: nn.Module, split: TokenizedSplit, device: torch.device, *,
    max_tokens: int, pad_to_multiple: int = 8, label_smoothing: float = 0.0, dist: DistInfo = SINGLE,
) -> dict[str, float]:
    """Smoothed loss, NLL (bits per token) and perplexity over the whole ``split``; leaves ``model`` in eval mode.

    With several ranks each scores every ``world_size``-th batch of the length-sorted list and the sums
    (loss, NLL, tokens) are all-reduced, so every rank works and every rank returns the same scores.
    """
    sampler = TokenBatchSampler(
        split.src_lens, split.tgt_lens, max_tokens, seed=0, shuffle=False, pad_to_multiple=pad_to_multiple,
    )  # one rank's view of all batches (no equal-count splitting needed: one all-reduce at the end)
    model.eval()
    loss_sum = nll_sum = ntokens = 0.0
    for indices in sampler.batches(0)[dist.rank :: dist.world_size]:
        batch = collate(split, indices, pad_to_multiple).to(device)
        logits = model(batch.src, batch.src_pad_mask, batch.tgt_in)  # (B, T, V)
        live = live_classes(model.decoder.logits_bias)
        loss, nll = label_smoothed_nll_loss(logits, batch.tgt_out, label_smoothing, PAD_ID, live)
        loss_sum, nll_sum, ntokens = loss_sum + float(loss), nll_sum + float(nll), ntokens + batch.ntokens
    loss_sum, nll_sum, ntokens = all_reduce_sum([loss_sum, nll_sum, ntokens], dist, device)
    ntokens = max(ntokens, 1.0)
    nll_bits = nll_sum / ntokens / math.log(2)
    return {"loss": loss_sum / ntokens / math.log(2), "nll_loss": nll_bits, "ppl": 2**nll_bits}


def valid_translations(
    model: nn.Module, tokenizers: Tokenizers, split: TokenizedSplit, decode_cfg: DecodeConfig, device: torch.device,
    *, max_positions: int, max_sentences: int = 0, dist: DistInfo = SINGLE, target_lang: str | None = None,
) -> list[str]:
    """Hypotheses for the sources of ``split`` (the first ``max_sentences``; 0 = all), in order, on every rank;
    ``target_lang`` is the target a multilingual model is asked for (its tag goes before each source).

    Rank ``r`` decodes sentences ``r, r + W, ...`` (a similar mix of lengths on every rank); the shares are
    gathered and put back in order.
    """
    n = len(split) if max_sentences <= 0 else min(len(split), max_sentences)
    mine = range(dist.rank, n, dist.world_size)
    translator = Translator(model, tokenizers, decode_cfg, device, max_positions=max_positions)
    shares = all_gather_objects(translator.translate([split.src_text[i] for i in mine], target_lang=target_lang), dist)
    hyps = [""] * n
    for rank, share in enumerate(shares):
        hyps[rank:n:dist.world_size] = share
    return hyps


def valid_bleu(
    model: nn.Module, tokenizers: Tokenizers, split: TokenizedSplit, decode_cfg: DecodeConfig, device: torch.device,
    *, max_positions: int, max_sentences: int = 0, dist: DistInfo = SINGLE, target_lang: str | None = None,
) -> dict[str, float | str]:
    """Decode the sources of ``split`` (the first ``max_sentences``; 0 = all; into ``target_lang`` for a
    multilingual model) and score them: BLEU, chrF.

    With several ranks every rank decodes its share (``valid_translations``), rank 0 scores the whole
    output once and every rank returns rank 0's scores.
    """
    hyps = valid_translations(model, tokenizers, split, decode_cfg, device,
                              max_positions=max_positions, max_sentences=max_sentences, dist=dist,
                              target_lang=target_lang)
    scores: dict[str, float | str] = {}
    if dist.is_main:
        scores = bleu_and_chrf(hyps, list(split.tgt_text[: len(hyps)]))
    return broadcast_object(scores, dist)


def validate(
    model: nn.Module, tokenizers: Tokenizers, split: TokenizedSplit, settings: ValidationSettings,
    device: torch.device, dist: DistInfo = SINGLE,
) -> dict[str, float | str]:
    """Loss and (when ``settings.bleu``) BLEU scores of ``model`` on ``split``; the model is back in train mode.

    Every rank of ``dist`` calls it with the same (unwrapped) model, does its share of the work and
    gets the same scores. With several pairs: each pair's scores and their means (``mean_over_pairs``).
    """
    if len(settings.pairs) <= 1:
        scores = validate_pair(model, tokenizers, split, settings, device, dist)
    else:
        scores = mean_over_pairs({
            pair.name: validate_pair(model, tokenizers, split.pair_split(index), settings, device, dist,
                                     target_lang=settings.target_lang(pair))
            for index, pair in enumerate(settings.pairs)
        })
    model.train()
    return scores


def validate_pair(
    model: nn.Module, tokenizers: Tokenizers, split: TokenizedSplit, settings: ValidationSettings,
    device: torch.device, dist: DistInfo = SINGLE, target_lang: str | None = None,
) -> dict[str, float | str]:
    """Loss and (when ``settings.bleu``) BLEU scores on one pair's ``split``; leaves the model in eval mode."""
    scores: dict[str, float | str] = dict(valid_loss(
        model, split, device, max_tokens=settings.max_tokens, pad_to_multiple=settings.pad_to_multiple,
        label_smoothing=settings.label_smoothing, dist=dist,
    ))
    if settings.bleu:
        scores.update(valid_bleu(model, tokenizers, split, settings.decode, device,
                                 max_positions=settings.max_positions, max_sentences=settings.max_sentences,
                                 dist=dist, target_lang=target_lang))
    return scores
