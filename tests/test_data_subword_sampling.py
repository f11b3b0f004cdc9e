"""Subword regularisation: BPE-dropout of training batches only, reproducible, outside the data cache."""

import dataclasses
import json

import numpy as np
import pytest
import torch
from helpers import tiny_config

from mt.config import ConfigError
from mt.data import SubwordSampling, TokenBatchSampler, collate, prepare_data, subword_sampling
from mt.data.binarize import open_splits, plan_cache
from mt.data.subword_sampling import sampling_seeds
from mt.train.trainer import Trainer
from mt.train.validate import validate


@pytest.fixture(scope="module")
def demo(tmp_path_factory):
    """The tiny demo's prepared data and its config (the sampling value does not matter to the cache)."""
    tmp = tmp_path_factory.mktemp("subword")
    cfg = tiny_config(tmp, "data.subword_sampling=0.3")
    return cfg, prepare_data(cfg.data)


def first_batch(data):
    """The training split and its 32 longest examples (most merges to drop)."""
    train = data.splits["train"]
    rows = np.argsort(-train.tgt_lens.numpy(), kind="stable")[:32].tolist()
    return train, rows


def unbounded(sampling):
    """``sampling`` with a token budget no batch reaches: one ``Batch`` per call, rows in the given order."""
    return dataclasses.replace(sampling, max_tokens=10**9)


def rows_of(tensor, mask):
    """Each row's non-pad ids, (B, L) -> list of lists."""
    return [r[~m].tolist() for r, m in zip(tensor, mask, strict=True)]


def test_off_means_no_sampler_and_the_loop_collates_the_binarized_ids(tmp_path):
    trainer = Trainer(tiny_config(tmp_path, "train.max_updates=1"))
    loop = trainer.update_loop()
    assert loop.sampling is None
    group = loop.micro_batch_groups()[0]
    got, want = loop.collate_update(group)[0], collate(loop.split, group[0], trainer.cfg.data.pad_to_multiple)
    for name in ("src", "src_pad_mask", "tgt_in", "tgt_out", "tgt_pad_mask", "ids"):
        assert torch.equal(getattr(got, name), getattr(want, name)), name
    assert got.ntokens == want.ntokens


def test_sampled_batches_differ_from_the_binarized_ids_but_decode_to_the_same_text(demo):
    cfg, data = demo
    sampling = subword_sampling(cfg.data, data.tokenizers, cfg.model.max_positions)
    assert sampling is not None and sampling.alpha == 0.3 and sampling.max_pieces == cfg.data.max_len
    train, rows = first_batch(data)
    [sampled], plain = unbounded(sampling).collate(train, rows, (1, 0, 0, 0)), collate(train, rows)
    tok = data.tokenizers
    src, src_plain = rows_of(sampled.src, sampled.src_pad_mask), rows_of(plain.src, plain.src_pad_mask)
    tgt, tgt_plain = rows_of(sampled.tgt_out, sampled.tgt_pad_mask), rows_of(plain.tgt_out, plain.tgt_pad_mask)
    assert src != src_plain and tgt != tgt_plain
    assert [tok.src.decode(r) for r in src] == [tok.src.decode(r) for r in src_plain]
    assert [tok.tgt.decode(r) for r in tgt] == [tok.tgt.decode(r) for r in tgt_plain]
    # dropped merges only split pieces: never fewer pieces than the deterministic segmentation
    assert all(len(a) >= len(b) for a, b in zip(src + tgt, src_plain + tgt_plain, strict=True))
    # the batch's own invariants hold for sampled rows too: BOS + pieces in, pieces + EOS out
    tgt_in = rows_of(sampled.tgt_in, sampled.tgt_pad_mask)
    assert all(i[1:] == o[:-1] and i[0] == 2 and o[-1] == 3 for i, o in zip(tgt_in, tgt, strict=True))
    assert sampled.ntokens == sum(map(len, tgt)) and sampled.ids.tolist() == rows


def test_the_same_key_gives_the_same_batch_whatever_was_sampled_in_between(demo):
    cfg, data = demo
    sampling = SubwordSampling(data.tokenizers, 0.3, cfg.data.max_len, max_tokens=10**9)
    train, rows = first_batch(data)
    [first] = sampling.collate(train, rows, (1, 2, 3, 0))
    [other] = sampling.collate(train, rows, (1, 2, 4, 0))  # the next batch index
    [again] = sampling.collate(train, rows, (1, 2, 3, 0))
    assert torch.equal(first.src, again.src) and torch.equal(first.tgt_out, again.tgt_out)
    assert not (torch.equal(first.src, other.src) and torch.equal(first.tgt_out, other.tgt_out))
    assert len({*sampling_seeds((1, 2, 3, 0)), *sampling_seeds((1, 2, 4, 0)), *sampling_seeds((1, 2, 3, 1))}) == 6


def test_a_sampled_batch_over_max_tokens_is_split_into_micro_batches_that_fit(demo):
    cfg, data = demo
    train = data.splits["train"]
    sampling = subword_sampling(cfg.data, data.tokenizers, cfg.model.max_positions)
    sampler = TokenBatchSampler(train.src_lens, train.tgt_lens, cfg.data.max_tokens, seed=1)
    split_any = False
    for j, rows in enumerate(sampler.batches(0)[:10]):
        parts = sampling.collate(train, rows, (1, 0, j, 0))
        [whole] = unbounded(sampling).collate(train, rows, (1, 0, j, 0))
        split_any |= len(parts) > 1
        assert all(len(b) * max(b.src.size(1), b.tgt_in.size(1)) <= cfg.data.max_tokens for b in parts)
        ids = torch.cat([b.ids for b in parts])
        assert sorted(ids.tolist()) == sorted(rows) and sum(b.ntokens for b in parts) == whole.ntokens
        # the same segmentation, however the rows were split
        by_id = {int(i): r for b in parts for i, r in zip(b.ids, rows_of(b.tgt_out, b.tgt_pad_mask), strict=True)}
        assert [by_id[i] for i in rows] == rows_of(whole.tgt_out, whole.tgt_pad_mask)
    assert split_any  # p=0.3 lengthens the pieces past the budget the sampler packed by


def test_a_sampled_side_longer_than_max_pieces_falls_back_to_its_binarized_ids(demo):
    cfg, data = demo
    train, rows = first_batch(data)
    unbounded = data.tokenizers.src.sample_batch(train.src_text.take(rows), 0.5, seed=7)
    limit = int(np.median([len(ids) for ids in unbounded]))
    src = SubwordSampling(data.tokenizers, 0.5, max_pieces=limit, max_tokens=10**9).resegment(
        data.tokenizers.src, train.src_text, train.src_array, rows, seed=7
    )
    over = [j for j, ids in enumerate(unbounded) if len(ids) > limit]
    assert over and len(over) < len(rows)  # some rows fell back, others kept their sample
    for j, i in enumerate(rows):
        assert src[j].tolist() == (train.src_ids(i) if j in over else unbounded[j])
    # the bound also keeps [BOS] + pieces inside the model's positions
    assert subword_sampling(cfg.data, data.tokenizers, max_positions=10).max_pieces == 9
    tight = dataclasses.replace(cfg.data, max_tokens=44)  # 44 // 8 * 8: a side of 39 pieces + EOS fits alone
    assert subword_sampling(tight, data.tokenizers, max_positions=1024).max_pieces == 39
    with pytest.raises(ValueError, match="seed must be in"):
        data.tokenizers.src.sample_batch(["one"], 0.1, seed=2**32 - 1)


def test_validation_test_and_encoding_never_sample(demo, tmp_path):
    cfg, data = demo
    cache = f"data.cache_dir={cfg.data.cache_dir}"
    scores = {}
    for p in (0.0, 0.5):
        trainer = Trainer(tiny_config(tmp_path / str(p), cache, f"data.subword_sampling={p}", "train.valid_bleu=true",
                                      "train.valid_bleu_max_sentences=8", "decode.max_len_b=8"))
        loop = trainer.update_loop()
        loop.collate_update(loop.micro_batch_groups()[0])  # a sampled batch first: it reseeds SentencePiece
        scores[p] = validate(trainer.model, trainer.parts.tokenizers, trainer.parts.data.splits["valid"],
                             trainer.valid_settings, trainer.device)
    assert scores[0.5] == scores[0.0]
    for name in ("valid", "test"):
        split = data.splits[name]
        for i in range(len(split)):
            assert data.tokenizers.src.encode(split.src_text[i]) == split.src_ids(i)
            assert data.tokenizers.tgt.encode(split.tgt_text[i]) == split.tgt_ids(i)


def test_the_sampling_value_is_not_part_of_the_cache_key(demo, tmp_path):
    cfg, data = demo
    cache = f"data.cache_dir={cfg.data.cache_dir}"
    plans = [plan_cache(c.data, open_splits(c.data)) for c in
             (tiny_config(tmp_path, cache, f"data.subword_sampling={p}") for p in (0.0, 0.3, 0.9))]
    assert plans[0] == plans[1] == plans[2] and plans[0].root == data.cache_dir
    stats = {s: (d / "stats.json").stat().st_mtime_ns for s, d in plans[0].split_dirs.items()}
    off = prepare_data(tiny_config(tmp_path, cache, "data.subword_sampling=0.0").data)
    assert {s: (d / "stats.json").stat().st_mtime_ns for s, d in plans[0].split_dirs.items()} == stats  # reused
    for name in ("train", "valid", "test"):
        a, b = off.splits[name], data.splits[name]
        assert len(a) == len(b) and all(a.src_ids(i) == b.src_ids(i) and a.tgt_ids(i) == b.tgt_ids(i)
                                        for i in range(len(a)))


@pytest.mark.parametrize("value", ["1.0", "-0.1", "1.5"])
def test_the_config_rule_rejects_values_outside_zero_one(tmp_path, value):
    with pytest.raises(ConfigError, match=rf"data\.subword_sampling={value}: must be in \[0, 1\)"):
        tiny_config(tmp_path, f"data.subword_sampling={value}")


def _train_losses(run_dir):
    rows = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
    return {r["step"]: r["loss"] for r in rows if r["split"] == "train"}


def test_training_samples_and_a_resumed_run_samples_exactly_the_same(demo, tmp_path):
    cfg, _ = demo
    common = (f"data.cache_dir={cfg.data.cache_dir}", "train.validate_every=1000", "train.save_every=1000")

    def run(name, *extra):
        Trainer(tiny_config(tmp_path / name, *common, *extra)).run()
        return _train_losses(tmp_path / name / "run")

    full = run("full", "data.subword_sampling=0.3", "train.max_updates=6")
    run("resumed", "data.subword_sampling=0.3", "train.max_updates=3")
    resumed = run("resumed", "data.subword_sampling=0.3", "train.max_updates=6")
    assert sorted(full) == list(range(1, 7)) and resumed == full  # bit for bit, the sampled updates 4-6 included
    plain = run("plain", "train.max_updates=1")
    assert plain[1] != full[1]  # same weights, same examples: only the segmentation differs


def test_the_loop_samples_each_batch_under_seed_epoch_batch_index_and_rank(demo, tmp_path):
    cfg, _ = demo
    trainer = Trainer(tiny_config(tmp_path, f"data.cache_dir={cfg.data.cache_dir}", "data.subword_sampling=0.3",
                                  "train.seed=5", "train.update_freq=2"))
    trainer.state.epoch, trainer.state.batch_in_epoch = 2, 4
    loop = trainer.update_loop()
    group = loop.micro_batch_groups()[0]
    got = loop.collate_update(group)
    want = [b for j, idx in enumerate(group) for b in loop.sampling.collate(loop.split, idx, (5, 2, 4 + j, 0))]
    assert len(got) == len(want) >= 2
    for batch, expected in zip(got, want, strict=True):
        assert torch.equal(batch.src, expected.src) and torch.equal(batch.tgt_out, expected.tgt_out)
