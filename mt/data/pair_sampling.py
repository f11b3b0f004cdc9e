"""Temperature sampling of language pairs (XLM, fairseq's multilingual translation): one epoch's examples.

Pair ``i`` with ``n_i`` training examples gets the share ``p_i = n_i^(1/T) / sum_j n_j^(1/T)`` of an epoch
of ``N = sum_j n_j`` examples: ``T = 1`` keeps the natural sizes, a larger ``T`` moves toward uniform (small
pairs are repeated, large ones subsampled). Each epoch draws its examples anew, deterministic in the
generator it is given (the batch sampler's ``(seed, epoch)``). With equal sizes, or one pair, an epoch is
every example once: the plain concatenation.
"""

from __future__ import annotations

import numpy as np

from mt.data.errors import DataError


def pair_shares(sizes: np.ndarray, temperature: float) -> np.ndarray:
    """``p_i ~ n_i^(1/T)``, summing to 1; ``(P,)`` from ``(P,)`` positive sizes."""
    if temperature <= 0:
        raise DataError(f"data.pair_temperature must be positive, got {temperature}")
    sizes = np.asarray(sizes, dtype=np.float64)
    if len(sizes) == 0 or (sizes <= 0).any():
        raise DataError(f"every language pair needs training examples, got sizes {sizes.astype(int).tolist()}")
    weights = np.exp(np.log(sizes) / temperature)  # n^(1/T) without overflow for large T
    return weights / weights.sum()


def pair_counts(sizes: np.ndarray, temperature: float) -> np.ndarray:
    """Examples per pair in one epoch: ``N * p_i`` rounded (largest remainders), summing to ``N``, each >= 1."""
    sizes = np.asarray(sizes, dtype=np.int64)
    exact = pair_shares(sizes, temperature) * sizes.sum()  # (P,)
    counts = np.floor(exact).astype(np.int64)
    short = int(sizes.sum() - counts.sum())
    counts[np.argsort(-(exact - counts), kind="stable")[:short]] += 1
    return np.maximum(counts, 1)


class PairResampler:
    """One epoch's example indices, each pair resampled to its temperature share (see the module doc)."""

    def __init__(self, pairs: np.ndarray, temperature: float) -> None:
        pairs = np.asarray(pairs, dtype=np.int64)  # (N,) pair index of each example
        self.members = [np.flatnonzero(pairs == p) for p in range(int(pairs.max()) + 1)] if len(pairs) else []
        self.counts = pair_counts(np.array([len(m) for m in self.members]), temperature)  # (P,)

    def epoch_examples(self, rng: np.random.Generator) -> np.ndarray:
        """The example indices of one epoch, pair after pair (not shuffled), ``(sum(counts),)``."""
        parts = []
        for members, count in zip(self.members, self.counts.tolist(), strict=True):
            whole, rest = divmod(count, len(members))
            parts += [np.tile(members, whole), rng.choice(members, rest, replace=False)]
        return np.concatenate(parts)
