"""Subword regularisation of training batches: BPE-dropout re-segmentation of each batch's raw text.

The binarized ids of a split are the deterministic segmentation (``Tokenizer.encode``): the batch sampler
packs by their lengths, and validation, test and decoding read only them. With ``data.subword_sampling = p > 0``
a training batch re-encodes its examples' raw text with SentencePiece's BPE-dropout (each merge skipped
with probability ``p``; Provilkov et al. 2020), so the model sees many segmentations of one sentence.

- Reproducible: a batch is sampled from ``key = (train seed, epoch, batch index, rank)``, so a resumed run
  sees exactly the segmentation the uninterrupted one saw.
- Bounded: a sampled side longer than ``max_pieces`` (``data.max_len``, at most the model's positions minus
  the EOS/BOS slot) falls back to its deterministic ids, which passed the same length filter.
- Not bounded: the token budget. Sampled sequences are longer than the deterministic ones the sampler
  packed by, so a batch may exceed ``data.max_tokens`` by that growth.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np

from mt.config import DataConfig
from mt.data.batching import Batch, pad_pairs
from mt.data.split import TextColumn, TokenizedSplit
from mt.data.tokenizer import SPM_RANDOM_SEED, Tokenizer, Tokenizers


@dataclass(frozen=True)
class SubwordSampling:
    """BPE-dropout with probability ``alpha`` for training batches; sides over ``max_pieces`` keep their ids."""

    tokenizers: Tokenizers
    alpha: float
    max_pieces: int

    def collate(self, split: TokenizedSplit, indices: Sequence[int], key: Sequence[int],
                pad_to_multiple: int = 8) -> Batch:
        """``collate``, with both sides of examples ``indices`` re-segmented under ``key`` (non-negative ints)."""
        rows = list(indices)
        src_seed, tgt_seed = sampling_seeds(key)
        src = self.resegment(self.tokenizers.src, split.src_text, split.src_array, rows, src_seed)
        tgt = self.resegment(self.tokenizers.tgt, split.tgt_text, split.tgt_array, rows, tgt_seed)
        return pad_pairs(src, tgt, rows, pad_to_multiple)

    def resegment(self, tokenizer: Tokenizer, texts: TextColumn,
                  binarized: Callable[[int], np.ndarray], rows: list[int],
                  seed: int) -> list[np.ndarray]:
        """One side's sampled ids of ``rows``; a sampled row over ``max_pieces`` is replaced by ``binarized(i)``."""
        sampled = tokenizer.sample_batch(texts.take(rows), self.alpha, seed)
        return [
            np.asarray(ids, dtype=np.int32) if len(ids) <= self.max_pieces else binarized(i)
            for i, ids in zip(rows, sampled, strict=True)
        ]


def sampling_seeds(key: Sequence[int]) -> tuple[int, int]:
    """Two SentencePiece seeds (source, target) drawn from ``key``: independent sides, distinct batches."""
    src, tgt = np.random.SeedSequence(list(key)).generate_state(2, dtype=np.uint64) % SPM_RANDOM_SEED
    return int(src), int(tgt)


def subword_sampling(cfg: DataConfig, tokenizers: Tokenizers, max_positions: int) -> SubwordSampling | None:
    """The training batches' sampling of ``cfg`` (None when ``cfg.subword_sampling`` is 0).

    ``max_positions - 1``: the longest side the model can place (``pieces + EOS``, ``BOS + pieces``)."""
    if cfg.subword_sampling <= 0:
        return None
    return SubwordSampling(tokenizers, cfg.subword_sampling, min(cfg.max_len, max_positions - 1))
