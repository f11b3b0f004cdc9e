"""Several language pairs read as one split: each pair's split in pair order, with an int ``pair`` column.

Pair ``i`` of ``data_pairs(cfg)`` reads its split from the same directory and prefixes as every other pair
(``data.extra_train``'s too), with its own languages (Multi30k ``train.en`` + ``train.fr`` for en-fr). Rows
keep their raw text; the ``pair`` column (the index into ``data_pairs``) tells binarizing which target tag to
put before the source ids, the batch sampler which pair to resample, and validation which pair to score. A
config of one pair reads exactly what it always did (no ``pair`` column, the same content key).
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from pathlib import Path

import datasets

from mt.config import DataConfig
from mt.data.languages import LanguagePair, data_pairs
from mt.data.sources import RawSplit, fingerprint, open_split

PAIR_COLUMN = "pair"


def pair_config(cfg: DataConfig, pair: LanguagePair) -> DataConfig:
    """``cfg`` reading one pair: its ``src_lang`` / ``tgt_lang`` set to the pair's languages."""
    return replace(cfg, src_lang=pair.src, tgt_lang=pair.tgt)


@dataclass(frozen=True)
class PairedSplit:
    """One split of several pairs, not yet read: ``key`` covers every pair's content, in order."""

    name: str
    key: str
    description: str
    parts: tuple[RawSplit, ...]  # one per pair, in ``data_pairs`` order

    def load(self) -> datasets.Dataset:
        """Every pair's rows, pair after pair (columns ``src``, ``tgt``, ``pair``)."""
        loaded = []
        for index, part in enumerate(self.parts):
            ds = part.load()
            loaded.append(ds.add_column(PAIR_COLUMN, [index] * len(ds)))
        return datasets.concatenate_datasets(loaded)


def open_pairs_split(cfg: DataConfig, split: str, cache_root: Path) -> RawSplit | PairedSplit:
    """``split`` of every pair of ``cfg``: a ``RawSplit`` for one pair (as before), else a ``PairedSplit``."""
    pairs = data_pairs(cfg)
    if len(pairs) == 1:
        return open_split(pair_config(cfg, pairs[0]), split, cache_root)
    parts = tuple(open_split(pair_config(cfg, p), split, cache_root) for p in pairs)
    key = fingerprint("pairs", [(p.name, part.key) for p, part in zip(pairs, parts, strict=True)])
    description = "; ".join(f"{p.name}: {part.description}" for p, part in zip(pairs, parts, strict=True))
    return PairedSplit(split, key, description, parts)
