"""Subword regularisation of training batches: BPE-dropout re-segmentation of each batch's raw text.

The binarized ids of a split are the deterministic segmentation (``Tokenizer.encode``): the batch sampler
packs by their lengths, and validation, test and decoding read only them. With ``data.subword_sampling = p > 0``
a training batch re-encodes its examples' raw text with SentencePiece's BPE-dropout (each merge skipped
with probability ``p``; Provilkov et al. 2020), so the model sees many segmentations of one sentence.

- Reproducible: a batch is sampled from ``key = (train seed, epoch, batch index, rank)``, so a resumed run
  sees exactly the segmentation the uninterrupted one saw.
- Bounded positions: a sampled side longer than ``max_pieces`` (``data.max_len``, the model's positions
  minus the EOS/BOS slot, and what fits ``data.max_tokens`` alone) falls back to its deterministic ids,
  which passed the same length filter.
- Bounded batches: sampled sequences are longer than the deterministic ones the sampler packed by (on
  Multi30k at p=0.1 ~1.4x the pieces, and a length-bucketed batch's longest row grows more than its
  average), so a sampled batch over ``max_tokens`` is split, by sampled length, into micro-batches that
  each fit. An update's gradient is normalised by all its target tokens, so the split changes the
  memory of a forward pass, not the update.
- Target tags: a multilingual split's sources start with their pair's tag (``>>fr<<``); the sampled source
  ids get the same tag in front (the text has none), counted in ``max_pieces``.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np

from mt.config import DataConfig
from mt.data.batching import Batch, batch_by_tokens, pad_pairs
from mt.data.binarize import pair_tag_ids
from mt.data.split import TextColumn, TokenizedSplit
from mt.data.tokenizer import SPM_RANDOM_SEED, Tokenizer, Tokenizers, round_up


@dataclass(frozen=True)
class SubwordSampling:
    """BPE-dropout with probability ``alpha`` for training batches, packed under ``max_tokens`` as the sampler
    packs (padded to ``pad_to_multiple``); a sampled side over ``max_pieces`` keeps its binarized ids."""

    tokenizers: Tokenizers
    alpha: float
    max_pieces: int
    max_tokens: int
    pad_to_multiple: int = 8
    tags: tuple[int, ...] | None = None  # each pair's target tag id (multilingual), put before sampled sources

    def collate(self, split: TokenizedSplit, indices: Sequence[int], key: Sequence[int]) -> list[Batch]:
        """Examples ``indices`` of ``split`` with both sides re-segmented under ``key`` (non-negative ints):
        one ``Batch`` in the given order when it fits ``max_tokens``, else several, by sampled length."""
        rows = list(indices)
        src_seed, tgt_seed = sampling_seeds(key)
        tags = [[self.tags[split.pairs[i]]] for i in rows] if self.tags is not None else None
        src = self.resegment(self.tokenizers.src, split.src_text, split.src_array, rows, src_seed, tags)
        tgt = self.resegment(self.tokenizers.tgt, split.tgt_text, split.tgt_array, rows, tgt_seed)
        cost = [round_up(max(len(s), len(t)) + 1, self.pad_to_multiple) for s, t in zip(src, tgt, strict=True)]
        return [
            pad_pairs([src[k] for k in part], [tgt[k] for k in part], [rows[k] for k in part], self.pad_to_multiple)
            for part in parts_that_fit(cost, self.max_tokens)
        ]

    def resegment(
        self, tokenizer: Tokenizer, texts: TextColumn, binarized: Callable[[int], np.ndarray], rows: list[int],
        seed: int, prefixes: list[list[int]] | None = None,
    ) -> list[np.ndarray]:
        """One side's sampled ids of ``rows`` (each after its ``prefixes`` row: a target tag); a sampled row
        over ``max_pieces`` is replaced by ``binarized(i)``."""
        sampled = tokenizer.sample_batch(texts.take(rows), self.alpha, seed)
        if prefixes is not None:
            sampled = [[*prefix, *ids] for prefix, ids in zip(prefixes, sampled, strict=True)]
        return [
            np.asarray(ids, dtype=np.int32) if len(ids) <= self.max_pieces else binarized(i)
            for i, ids in zip(rows, sampled, strict=True)
        ]


def parts_that_fit(cost: list[int], max_tokens: int) -> list[list[int]]:
    """Row positions as one part, in order, when ``rows * max(cost) <= max_tokens``; else parts by ascending
    cost that each fit (every ``cost`` alone fits: ``max_pieces`` sees to it)."""
    if len(cost) * max(cost) <= max_tokens:
        return [list(range(len(cost)))]
    return batch_by_tokens(cost, max_tokens)


def sampling_seeds(key: Sequence[int]) -> tuple[int, int]:
    """Two SentencePiece seeds (source, target) drawn from ``key``: independent sides, distinct batches."""
    src, tgt = np.random.SeedSequence(list(key)).generate_state(2, dtype=np.uint64) % SPM_RANDOM_SEED
    return int(src), int(tgt)


def subword_sampling(cfg: DataConfig, tokenizers: Tokenizers, max_positions: int) -> SubwordSampling | None:
    """The training batches' sampling of ``cfg`` (None when ``cfg.subword_sampling`` is 0).

    A side keeps at most ``max_positions - 1`` pieces (``pieces + EOS``, ``BOS + pieces`` must fit the model's
    positions), ``data.max_len`` (the training filter) and what fits ``data.max_tokens`` on its own."""
    if cfg.subword_sampling <= 0:
        return None
    alone = cfg.max_tokens // cfg.pad_to_multiple * cfg.pad_to_multiple - 1  # round_up(n + 1, pad) <= max_tokens
    tags = pair_tag_ids(cfg, tokenizers)
    return SubwordSampling(
        tokenizers, cfg.subword_sampling, min(cfg.max_len, max_positions - 1, alone), cfg.max_tokens,
        cfg.pad_to_multiple, tags=tuple(tags) if tags is not None else None,
    )
