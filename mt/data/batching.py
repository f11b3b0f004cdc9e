"""Token-budget batching: the length-bucketed, shardable, resumable sampler and inference-time batching.

A sequence's cost is its length as the model sees it (pieces + EOS on the source, pieces + BOS/EOS shift on
the target, i.e. ``len + 1``), padded up to ``pad_to_multiple``; a batch costs ``batch size x`` the longest
padded sequence of either side, and never more than ``max_tokens``.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import dataclass, fields
from typing import TYPE_CHECKING, overload

import numpy as np
import torch

from mt.data.errors import DataError
from mt.data.pair_sampling import PairResampler
from mt.data.tokenizer import BOS_ID, EOS_ID, PAD_ID, round_up

if TYPE_CHECKING:
    from mt.data.split import TokenizedSplit


def _as_numpy(lens: torch.Tensor | Sequence[int] | np.ndarray) -> np.ndarray:
    if isinstance(lens, torch.Tensor):
        return lens.detach().cpu().numpy().astype(np.int64)
    return np.asarray(lens, dtype=np.int64)


def _pack_starts(order: np.ndarray, cost: np.ndarray, max_tokens: int, max_sentences: int = 0) -> list[int]:
    """Start positions (in ``order``, ascending cost) of greedy batches: ``len(batch) * max(cost) <= max_tokens``."""
    starts: list[int] = [0] if len(order) else []
    count = longest = 0
    for pos, c in enumerate(cost[order].tolist()):
        grown = max(longest, c)
        full = 0 < max_sentences <= count
        if count and (full or (count + 1) * grown > max_tokens):
            starts.append(pos)
            count, grown = 0, c
        count += 1
        longest = grown
    return starts


def _pack(order: np.ndarray, cost: np.ndarray, max_tokens: int, max_sentences: int = 0) -> list[list[int]]:
    """Greedy batches over ``order`` (ascending cost): ``len(batch) * max(cost) <= max_tokens``."""
    bounds = [*_pack_starts(order, cost, max_tokens, max_sentences), len(order)]
    return [order[a:b].tolist() for a, b in zip(bounds, bounds[1:], strict=False)]


class BatchList(Sequence[list[int]]):
    """Batches of example indices as one flat index array and per-batch ``[start, end)`` bounds.

    Indexing gives a batch as ``list[int]``, slicing gives a ``BatchList`` view: no Python int per example
    is kept (a list of lists would hold ~36 bytes per example, 160 MB for 4.5M pairs, per rank).
    """

    def __init__(self, flat: np.ndarray, starts: np.ndarray, ends: np.ndarray) -> None:
        self._flat, self._starts, self._ends = flat, starts, ends

    def __len__(self) -> int:
        return len(self._starts)

    @overload
    def __getitem__(self, i: int) -> list[int]: ...
    @overload
    def __getitem__(self, i: slice) -> BatchList: ...
    def __getitem__(self, i: int | slice) -> list[int] | BatchList:
        if isinstance(i, slice):
            return BatchList(self._flat, self._starts[i], self._ends[i])
        return self._flat[self._starts[i] : self._ends[i]].tolist()

    def sizes(self) -> np.ndarray:
        """Examples per batch, ``(len(self),)``."""
        return self._ends - self._starts

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, Sequence):
            return NotImplemented
        return len(self) == len(other) and all(a == b for a, b in zip(self, other, strict=True))

    __hash__ = None  # type: ignore[assignment]

    def __repr__(self) -> str:
        return f"BatchList({len(self)} batches, {int(self.sizes().sum())} examples)"


class TokenBatchSampler:
    """Length-bucketed batches of example indices under a token budget, sharded over ranks.

    Per epoch (``shuffle=True``): indices are shuffled with ``(seed, epoch)``, cut into chunks of about
    ``shuffle_chunk`` batches' worth of examples, sorted by length inside each chunk, packed into batches,
    and the batch order is shuffled. ``shuffle=False`` gives batches sorted by length (valid/test).

    Sharding: rank ``r`` takes batches ``r, r + W, r + 2W, ...`` of the epoch's list, so ranks are disjoint
    and together see every example exactly once. To give every rank the SAME number of batches, while the
    batch count is not a multiple of ``world_size`` the largest batch (most examples) is split in two halves.

    Several language pairs (``resampler``): each epoch first draws its examples, every pair resampled to its
    temperature share (``PairResampler``, under the same ``(seed, epoch)``), then shuffles and packs them as
    above, so one batch mixes pairs; an example may appear more than once in an epoch, or not at all.

    Resuming: ``iter_from(epoch, start_batch)`` recomputes the epoch's index lists (cheap, no model work) and
    starts at ``start_batch``: nothing is replayed.
    """

    def __init__(
        self,
        src_lens: torch.Tensor | Sequence[int],
        tgt_lens: torch.Tensor | Sequence[int],
        max_tokens: int,
        *,
        seed: int,
        shuffle: bool = True,
        rank: int = 0,
        world_size: int = 1,
        pad_to_multiple: int = 8,
        shuffle_chunk: int = 100,
        resampler: PairResampler | None = None,
    ) -> None:
        src, tgt = _as_numpy(src_lens), _as_numpy(tgt_lens)
        if src.shape != tgt.shape or src.ndim != 1:
            raise DataError(f"src_lens and tgt_lens must be 1-D of one length, got {src.shape} and {tgt.shape}")
        if not 0 <= rank < world_size:
            raise DataError(f"rank {rank} is outside world_size {world_size}")
        if len(src) < world_size:
            raise DataError(f"{len(src)} examples cannot be sharded over {world_size} ranks")
        longest = np.maximum(src, tgt)  # (N,) pieces of the longer side
        cost = -(-(longest + 1) // pad_to_multiple) * pad_to_multiple  # (N,) padded, with EOS/BOS
        over = np.flatnonzero(cost > max_tokens)
        if len(over):
            i = int(over[0])
            raise DataError(
                f"example {i} is too long for max_tokens={max_tokens}: {int(longest[i])} tokens + EOS, "
                f"padded to {int(cost[i])} (and {len(over) - 1} more); raise max_tokens or lower max_len"
            )
        self.longest, self.cost = longest.astype(np.int32), cost.astype(np.int32)  # 4 bytes per example each
        self.max_tokens, self.seed, self.shuffle = max_tokens, seed, shuffle
        self.rank, self.world_size, self.shuffle_chunk = rank, world_size, shuffle_chunk
        self.resampler = resampler
        self.epoch, self.start_batch = 0, 0
        self._memo: tuple[int, BatchList] | None = None

    def _all_batches(self, epoch: int) -> BatchList:
        """Every rank's batches of ``epoch``, interleaved, their count a multiple of ``world_size``."""
        if self._memo is not None and (self._memo[0] == epoch or not self.shuffle):
            return self._memo[1]
        if self.shuffle:
            rng = np.random.default_rng([self.seed, epoch])
            if self.resampler is None:
                perm = rng.permutation(len(self.cost))  # (N,)
            else:
                perm = rng.permutation(self.resampler.epoch_examples(rng))  # (M,) this epoch's mix of pairs
            per_batch = max(1, self.max_tokens // max(1, int(self.cost.mean())))
            chunk = max(1, self.shuffle_chunk * per_batch)
            parts, starts = [], []
            for start in range(0, len(perm), chunk):
                part = perm[start : start + chunk]
                part = part[np.argsort(self.longest[part], kind="stable")]
                parts.append(part)
                starts.extend(start + b for b in _pack_starts(part, self.cost, self.max_tokens))
            flat = np.concatenate(parts).astype(np.int32)  # (N,) each chunk sorted by length
            bounds = np.asarray(starts, dtype=np.int64)
            ends = np.append(bounds[1:], len(flat))
            order = rng.permutation(len(bounds))  # batch order
            bounds, ends = bounds[order], ends[order]
        else:
            flat = np.argsort(self.longest, kind="stable").astype(np.int32)  # (N,)
            bounds = np.asarray(_pack_starts(flat, self.cost, self.max_tokens), dtype=np.int64)
            ends = np.append(bounds[1:], len(flat))
        while len(bounds) % self.world_size:
            sizes = ends - bounds
            j = int(np.argmax(sizes))  # the first largest batch
            if sizes[j] < 2:
                raise DataError(
                    f"cannot give {self.world_size} ranks equal batch counts: {len(bounds)} single-example batches"
                )
            middle = bounds[j] + sizes[j] // 2
            bounds, ends = np.insert(bounds, j + 1, middle), np.insert(ends, j, middle)
        batches = BatchList(flat, bounds, ends)
        self._memo = (epoch, batches)
        return batches

    def batches(self, epoch: int) -> BatchList:
        """This rank's batches (example index lists) for ``epoch``; deterministic in ``(seed, epoch)``."""
        return self._all_batches(epoch)[self.rank :: self.world_size]

    def iter_from(self, epoch: int, start_batch: int = 0) -> Iterator[list[int]]:
        """This rank's batches of ``epoch`` from ``start_batch`` on (resume without replaying data)."""
        yield from self.batches(epoch)[start_batch:]

    def set_epoch(self, epoch: int, start_batch: int = 0) -> None:
        """What ``__iter__`` / ``__len__`` use (for ``DataLoader(batch_sampler=...)``)."""
        self.epoch, self.start_batch = epoch, start_batch

    def __iter__(self) -> Iterator[list[int]]:
        return self.iter_from(self.epoch, self.start_batch)

    def __len__(self) -> int:
        """Batches per rank in the current epoch (equal on every rank; may differ slightly between epochs)."""
        return len(self.batches(self.epoch))


def batch_by_tokens(lengths: Sequence[int], max_tokens: int, max_sentences: int = 0) -> list[list[int]]:
    """Inference batches of sentence indices sorted by length: ``len(batch) * max(length) <= max_tokens``
    and ``len(batch) <= max_sentences`` (0 = no limit). ``lengths`` count as given (add EOS yourself)."""
    lens = _as_numpy(lengths)
    over = np.flatnonzero(lens > max_tokens)
    if len(over):
        i = int(over[0])
        raise DataError(f"sentence {i} has {int(lens[i])} tokens, more than max_tokens={max_tokens}")
    return _pack(np.argsort(lens, kind="stable"), lens, max_tokens, max_sentences)


@dataclass
class Batch:
    """One padded training batch; masks are True at padding (see ARCHITECTURE.md, special ids)."""

    src: torch.Tensor  # (B, S) pieces + EOS
    src_pad_mask: torch.Tensor  # (B, S)
    tgt_in: torch.Tensor  # (B, T) BOS + pieces
    tgt_out: torch.Tensor  # (B, T) pieces + EOS
    tgt_pad_mask: torch.Tensor  # (B, T)
    ntokens: int  # non-pad tokens of tgt_out
    ids: torch.Tensor  # (B,) example indices in the split

    def __len__(self) -> int:
        return self.src.size(0)

    def to(self, device: torch.device | str, non_blocking: bool = False) -> Batch:
        """A copy with every tensor on ``device``."""
        moved = {f.name: getattr(self, f.name) for f in fields(self)}
        for name, value in moved.items():
            if isinstance(value, torch.Tensor):
                moved[name] = value.to(device, non_blocking=non_blocking)
        return Batch(**moved)


def collate(split: TokenizedSplit, indices: Sequence[int], pad_to_multiple: int = 8) -> Batch:
    """Pad examples ``indices`` of ``split`` (their binarized, deterministic ids) into a ``Batch``."""
    rows = list(indices)
    return pad_pairs([split.src_array(i) for i in rows], [split.tgt_array(i) for i in rows], rows, pad_to_multiple)


def pad_pairs(
    src_rows: Sequence[np.ndarray], tgt_rows: Sequence[np.ndarray], indices: Sequence[int], pad_to_multiple: int = 8
) -> Batch:
    """Pad piece-id rows into a ``Batch``: ``src = ids + [EOS]``, ``tgt_in = [BOS] + ids``, ``tgt_out = ids + [EOS]``,
    PAD elsewhere; S, T padded to ``pad_to_multiple``; ``indices`` are the rows' example indices (``Batch.ids``)."""
    if len(indices) == 0:
        raise DataError("cannot collate an empty batch")
    idx = torch.as_tensor(list(indices), dtype=torch.long)  # (B,)
    src_lens = torch.as_tensor([len(s) + 1 for s in src_rows], dtype=torch.long)  # (B,) with EOS
    tgt_lens = torch.as_tensor([len(t) + 1 for t in tgt_rows], dtype=torch.long)  # (B,) with BOS
    S, T = round_up(int(src_lens.max()), pad_to_multiple), round_up(int(tgt_lens.max()), pad_to_multiple)
    src = np.full((len(idx), S), PAD_ID, dtype=np.int64)  # (B, S)
    tgt_in = np.full((len(idx), T), PAD_ID, dtype=np.int64)  # (B, T)
    tgt_out = np.full((len(idx), T), PAD_ID, dtype=np.int64)  # (B, T)
    for row, (s, t) in enumerate(zip(src_rows, tgt_rows, strict=True)):
        src[row, : len(s)], src[row, len(s)] = s, EOS_ID
        tgt_in[row, 0], tgt_in[row, 1 : len(t) + 1] = BOS_ID, t
        tgt_out[row, : len(t)], tgt_out[row, len(t)] = t, EOS_ID
    src_pad_mask = torch.arange(S)[None, :] >= src_lens[:, None]  # (B, S)
    tgt_pad_mask = torch.arange(T)[None, :] >= tgt_lens[:, None]  # (B, T)
    return Batch(
        torch.from_numpy(src),
        src_pad_mask,
        torch.from_numpy(tgt_in),
        torch.from_numpy(tgt_out),
        tgt_pad_mask,
        ntokens=int(tgt_lens.sum()),
        ids=idx,
    )
