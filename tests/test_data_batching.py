"""Token-budget batching on Multi30k val: bounds, sharding, determinism, resume, collate, inference batches."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch

from mt.config import DataConfig
from mt.data import (
    BOS_ID,
    EOS_ID,
    PAD_ID,
    DataError,
    TokenBatchSampler,
    TokenizedSplit,
    batch_by_tokens,
    collate,
    prepare_data,
)

MAX_TOKENS = 512


@pytest.fixture(scope="module")
def valid(multi30k_dir: Path, tmp_path_factory: pytest.TempPathFactory) -> TokenizedSplit:
    cfg = DataConfig(
        source="files", dir=str(multi30k_dir), train_prefix="val", valid_prefix="val", vocab_size=1000,
        cache_dir=str(tmp_path_factory.mktemp("cache")),
    )  # fmt: skip
    return prepare_data(cfg, splits=("valid",)).splits["valid"]


def _sampler(split: TokenizedSplit, **kw: object) -> TokenBatchSampler:
    return TokenBatchSampler(split.src_lens, split.tgt_lens, kw.pop("max_tokens", MAX_TOKENS), seed=1, **kw)  # type: ignore[arg-type]


@pytest.mark.parametrize("shuffle", [True, False])
def test_no_batch_exceeds_max_tokens(valid: TokenizedSplit, shuffle: bool) -> None:
    sampler = _sampler(valid, shuffle=shuffle)
    sizes = []
    for indices in sampler.batches(0):
        batch = collate(valid, indices)
        assert len(batch) * max(batch.src.size(1), batch.tgt_in.size(1)) <= MAX_TOKENS
        sizes.append(len(batch) * max(batch.src.size(1), batch.tgt_in.size(1)))
    assert sum(sizes) / len(sizes) > 0.6 * MAX_TOKENS  # and the budget is actually used


@pytest.mark.parametrize("world_size", [1, 2, 3])
@pytest.mark.parametrize("shuffle", [True, False])
def test_every_example_once_per_epoch_across_ranks(valid: TokenizedSplit, world_size: int, shuffle: bool) -> None:
    for epoch in (0, 1):
        per_rank = [
            _sampler(valid, shuffle=shuffle, rank=r, world_size=world_size).batches(epoch) for r in range(world_size)
        ]
        assert len({len(b) for b in per_rank}) == 1  # equal batch counts
        assert all(
            len(_sampler(valid, rank=r, world_size=world_size, shuffle=shuffle)) == len(per_rank[r])
            for r in range(world_size)
        )
        seen = sorted(i for batches in per_rank for batch in batches for i in batch)
        assert seen == list(range(len(valid)))


def test_uneven_batch_count_splits_largest_batch() -> None:
    lens = [5] * 10  # padded cost 8 each: max_tokens 16 -> five batches of two
    assert len(TokenBatchSampler(lens, lens, 16, seed=0).batches(0)) == 5
    ranks = [TokenBatchSampler(lens, lens, 16, seed=0, rank=r, world_size=2).batches(0) for r in range(2)]
    assert [len(b) for b in ranks] == [3, 3]
    assert sorted(len(b) for batches in ranks for b in batches) == [1, 1, 2, 2, 2, 2]
    assert sorted(i for batches in ranks for b in batches for i in b) == list(range(10))
    with pytest.raises(DataError, match="cannot be sharded over 4 ranks"):
        TokenBatchSampler([1, 2, 3], [1, 2, 3], 16, seed=0, world_size=4)


def test_deterministic_per_seed_and_epoch(valid: TokenizedSplit) -> None:
    a, b = _sampler(valid), _sampler(valid)
    assert a.batches(3) == b.batches(3)
    assert a.batches(0) != a.batches(1)
    assert a.batches(0) == b.batches(0)  # after computing other epochs in between
    other_seed = TokenBatchSampler(valid.src_lens, valid.tgt_lens, MAX_TOKENS, seed=2)
    assert other_seed.batches(0) != a.batches(0)


def test_resume_mid_epoch_yields_exactly_the_rest(valid: TokenizedSplit) -> None:
    full = _sampler(valid, rank=1, world_size=2).batches(4)
    resumed = _sampler(valid, rank=1, world_size=2)  # a fresh process after a restart
    assert list(resumed.iter_from(4, 7)) == full[7:]
    resumed.set_epoch(4, start_batch=7)
    assert list(resumed) == full[7:]
    assert list(resumed.iter_from(4, len(full))) == []


def test_unshuffled_batches_are_sorted_by_length(valid: TokenizedSplit) -> None:
    batches = _sampler(valid, shuffle=False).batches(0)
    longest = torch.maximum(valid.src_lens, valid.tgt_lens)
    order = [i for b in batches for i in b]
    assert all(longest[i] <= longest[j] for i, j in zip(order, order[1:], strict=False))
    assert batches == _sampler(valid, shuffle=False).batches(5)


def test_shuffled_batches_are_length_bucketed(valid: TokenizedSplit) -> None:
    longest = torch.maximum(valid.src_lens, valid.tgt_lens).float()
    spread = [float(longest[b].max() - longest[b].min()) for b in _sampler(valid).batches(0)]
    assert sum(spread) / len(spread) < 0.5 * float(longest.max() - longest.min())


def test_collate_layout(valid: TokenizedSplit) -> None:
    indices = [5, 0, 900]
    batch = collate(valid, indices, pad_to_multiple=8)
    S = max(int(valid.src_lens[i]) for i in indices) + 1
    T = max(int(valid.tgt_lens[i]) for i in indices) + 1
    assert batch.src.shape == (3, -(-S // 8) * 8) and batch.tgt_in.shape == batch.tgt_out.shape == (3, -(-T // 8) * 8)
    assert batch.src.dtype == batch.tgt_in.dtype == torch.long and batch.src_pad_mask.dtype == torch.bool
    for row, i in enumerate(indices):
        src, tgt = valid.src_ids(i), valid.tgt_ids(i)
        assert batch.src[row].tolist() == src + [EOS_ID] + [PAD_ID] * (batch.src.size(1) - len(src) - 1)
        assert batch.tgt_in[row].tolist() == [BOS_ID] + tgt + [PAD_ID] * (batch.tgt_in.size(1) - len(tgt) - 1)
        assert batch.tgt_out[row].tolist() == tgt + [EOS_ID] + [PAD_ID] * (batch.tgt_out.size(1) - len(tgt) - 1)
    assert torch.equal(batch.src_pad_mask, batch.src == PAD_ID)
    assert torch.equal(batch.tgt_pad_mask, batch.tgt_out == PAD_ID)
    assert batch.ntokens == int((~batch.tgt_pad_mask).sum()) == sum(int(valid.tgt_lens[i]) + 1 for i in indices)
    assert batch.ids.tolist() == indices
    moved = batch.to("cpu")
    assert torch.equal(moved.src, batch.src) and moved.ntokens == batch.ntokens


def test_too_long_example_is_a_clear_error(valid: TokenizedSplit) -> None:
    longest = torch.maximum(valid.src_lens, valid.tgt_lens)
    padded = (longest + 1 + 7) // 8 * 8
    first = int(torch.nonzero(padded > 56)[0])
    assert 0 < int((padded > 56).sum()) < len(valid)
    message = rf"example {first} is too long for max_tokens=56: {int(longest[first])} tokens \+ EOS, padded to 64"
    with pytest.raises(DataError, match=message):
        _sampler(valid, shuffle=False, max_tokens=56)


def test_batch_by_tokens() -> None:
    lengths = [7, 3, 12, 3, 1, 9, 0, 4]
    batches = batch_by_tokens(lengths, max_tokens=16, max_sentences=3)
    assert sorted(i for b in batches for i in b) == list(range(len(lengths)))
    flat = [lengths[i] for b in batches for i in b]
    assert flat == sorted(lengths)
    assert all(len(b) <= 3 and len(b) * max(lengths[i] for i in b) <= 16 for b in batches)
    with pytest.raises(DataError, match="sentence 2 has 12 tokens, more than max_tokens=10"):
        batch_by_tokens(lengths, max_tokens=10)


def test_batch_list_indexes_slices_and_compares_like_a_list_of_lists() -> None:
    from mt.data.batching import BatchList

    flat = np.array([4, 2, 0, 1, 3, 5])
    batches = BatchList(flat, np.array([0, 2, 5]), np.array([2, 5, 6]))
    as_lists = [[4, 2], [0, 1, 3], [5]]
    assert len(batches) == 3 and list(batches) == as_lists and batches == as_lists
    assert batches[1] == [0, 1, 3] and batches[-1] == [5] and all(type(i) is int for i in batches[1])
    assert batches[1:] == as_lists[1:] and batches[::2] == as_lists[::2] and isinstance(batches[1:], BatchList)
    assert batches != as_lists[:2] and batches.sizes().tolist() == [2, 3, 1]
    with pytest.raises(IndexError):
        batches[3]


def test_sampler_keeps_no_python_int_per_example() -> None:
    import tracemalloc

    n = 200_000
    lens = np.random.default_rng(0).integers(5, 60, n)
    tracemalloc.start()
    try:
        sampler = TokenBatchSampler(lens, lens, 4096, seed=1, rank=1, world_size=2)
        batches = sampler.batches(0)
        retained, _ = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert sum(batches.sizes()) + sum(TokenBatchSampler(lens, lens, 4096, seed=1, world_size=2).batches(0).sizes()) == n
    assert retained / n < 16  # three int32 arrays (longest, cost, order): 12 bytes; a list of lists: ~56
