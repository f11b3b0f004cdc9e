"""Several language pairs as data: temperature sampling, the joint tokenizer's target tags, binarized pairs."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest
from helpers import compose_config

from mt.config import ConfigError
from mt.data import DataError, TokenBatchSampler, prepare_data
from mt.data.binarize import open_splits, plan_cache
from mt.data.demo import demo_numbers, demo_words, write_demo_corpus
from mt.data.languages import lang_tag
from mt.data.pair_sampling import PairResampler, pair_counts, pair_shares

SMALL = [
    "experiment=demo",
    "data.demo.train_size=200",
    "data.demo.valid_size=20",
    "data.demo.test_size=20",
    "data.demo.max_number=9999",
    "data.vocab_size=160",
    "data.num_workers=1",
]


def small_demo(tmp_path: Path, *extra: str):
    return compose_config([*SMALL, f"data.cache_dir={tmp_path / 'cache'}", *extra])


# ------------------------------------------------------------------------------------------- temperature


def test_pair_shares_follow_size_to_the_power_one_over_t() -> None:
    sizes = np.array([100, 900])
    assert pair_shares(sizes, 1.0) == pytest.approx([0.1, 0.9])
    assert pair_shares(sizes, 2.0) == pytest.approx([10 / 40, 30 / 40])  # sqrt: 10 and 30
    assert pair_shares(sizes, 1e6) == pytest.approx([0.5, 0.5], abs=1e-5)  # large T: uniform
    assert pair_shares(np.array([7, 7, 7]), 5.0) == pytest.approx([1 / 3] * 3)


def test_pair_counts_sum_to_the_corpus_and_keep_every_pair() -> None:
    assert pair_counts(np.array([100, 900]), 2.0).tolist() == [250, 750]
    assert pair_counts(np.array([3, 3, 3]), 1.0).tolist() == [3, 3, 3]
    counts = pair_counts(np.array([1, 10_000, 333]), 1.0)
    assert counts.sum() in (10_334, 10_335) and counts.min() >= 1  # the 1-example pair is kept once
    with pytest.raises(DataError, match="needs training examples"):
        pair_shares(np.array([5, 0]), 1.0)


def test_equal_pairs_are_the_plain_concatenation_and_small_pairs_are_repeated() -> None:
    pairs = np.repeat([0, 1], 50)
    epoch = PairResampler(pairs, 3.0).epoch_examples(np.random.default_rng(0))
    assert sorted(epoch.tolist()) == list(range(100))
    pairs = np.repeat([0, 1], [10, 90])
    resampler = PairResampler(pairs, 100.0)  # nearly uniform: 50 / 50
    epoch = resampler.epoch_examples(np.random.default_rng(1))
    assert len(epoch) == 100 and np.bincount(pairs[epoch]).tolist() == resampler.counts.tolist()
    assert abs(int(resampler.counts[0]) - 50) <= 1
    assert set(epoch[pairs[epoch] == 0].tolist()) == set(range(10))  # every small-pair example, repeated
    again = resampler.epoch_examples(np.random.default_rng(1))
    assert epoch.tolist() == again.tolist()


def test_a_sampler_over_several_pairs_mixes_them_in_one_batch_deterministically() -> None:
    pairs = np.repeat([0, 1, 2], [60, 30, 10])
    lens = np.full(100, 7)
    make = lambda: TokenBatchSampler(lens, lens, 160, seed=3, resampler=PairResampler(pairs, 2.0))
    batches = make().batches(0)
    assert any(len(set(pairs[b].tolist())) > 1 for b in batches)
    assert batches == make().batches(0)
    assert batches != make().batches(1)
    seen = np.bincount(pairs[np.concatenate([np.asarray(b) for b in batches])], minlength=3)
    assert seen.tolist() == pair_counts(np.array([60, 30, 10]), 2.0).tolist()


# ------------------------------------------------------------------------------------------- demo corpus


def test_demo_corpus_has_french_and_czech_for_the_same_numbers(tmp_path: Path) -> None:
    cfg = small_demo(tmp_path).data.demo
    out = write_demo_corpus(cfg, tmp_path / "demo", languages=("en", "fr", "cs"))
    numbers = demo_numbers(cfg)["valid"]
    for lang in ("en", "fr", "cs"):
        lines = (out / f"valid.{lang}").read_text(encoding="utf-8").splitlines()
        assert lines == [demo_words(n, lang) for n in numbers]
    assert demo_words((21,), "fr") == "vingt et un"
    with pytest.raises(DataError, match="no language ja"):
        write_demo_corpus(cfg, tmp_path / "demo", languages=("en", "ja"))


# ---------------------------------------------------------------------------------------- binarized pairs


@pytest.fixture(scope="module")
def multi(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("multi")
    cfg = small_demo(tmp, "data.pairs=[en-de,en-fr]")
    return cfg, prepare_data(cfg.data)


def test_every_source_starts_with_its_pairs_tag_exactly_once(multi) -> None:
    cfg, data = multi
    tok = data.tokenizers.src
    tags = [tok.piece_id(lang_tag(t)) for t in ("de", "fr")]
    assert None not in tags and data.tokenizers.joint
    for split in data.splits.values():
        assert sorted(set(split.pairs.tolist())) == [0, 1]
        for i in range(len(split)):
            ids = split.src_ids(i)
            assert ids[0] == tags[split.pairs[i]]
            assert sum(x in tags for x in ids) == 1
            assert tok.decode(ids[1:]) == split.src_text[i]  # raw text, no tag in it


def test_per_pair_splits_hold_each_pairs_references(multi) -> None:
    cfg, data = multi
    valid = data.splits["valid"]
    de, fr = valid.pair_split(0), valid.pair_split(1)
    assert len(de) == len(fr) == cfg.data.demo.valid_size
    numbers = demo_numbers(cfg.data.demo)["valid"]
    assert list(de.tgt_text) == [demo_words(n, "de") for n in numbers]
    assert list(fr.tgt_text) == [demo_words(n, "fr") for n in numbers]
    assert list(de.src_text) == list(fr.src_text)


def test_a_tag_in_the_training_text_stays_one_piece(tmp_path: Path) -> None:
    corpus = tmp_path / "corpus"
    corpus.mkdir()
    en = [f"line {i} about >>fr<< and x>>de<<y" if i % 3 == 0 else f"plain line {i}" for i in range(60)]
    for split in ("train", "valid", "test"):
        (corpus / f"{split}.en").write_text("\n".join(en) + "\n")
        (corpus / f"{split}.de").write_text("\n".join(f"zeile {i}" for i in range(60)) + "\n")
        (corpus / f"{split}.fr").write_text("\n".join(f"ligne {i}" for i in range(60)) + "\n")
    cfg = compose_config([
        "data=multi30k", f"data.dir={corpus}", "data.train_prefix=train", "data.valid_prefix=valid",
        "data.test_prefix=test", "data.vocab_size=80", "data.num_workers=1", f"data.cache_dir={tmp_path / 'c'}",
        "data.pairs=[en-de,en-fr]",
    ])
    data = prepare_data(cfg.data)
    tok = data.tokenizers.src
    fr = tok.piece_id(">>fr<<")
    assert fr is not None
    pieces = [tok.id_to_piece(i) for i in tok.encode("about >>fr<< and x>>de<<y")]
    assert ">>fr<<" in pieces and ">>de<<" in pieces  # never split into ">", ">", "fr", ...
    row = data.splits["train"].pair_split(1).src_ids(0)  # "line 0 about >>fr<< and x>>de<<y" into French
    assert row[0] == fr and tok.decode(row[1:]) == en[0]


def test_one_pair_keeps_its_cache_keys_and_layout(tmp_path: Path) -> None:
    plain = small_demo(tmp_path)
    listed = small_demo(tmp_path, "data.pairs=[en-de]")
    assert plan_cache(plain.data, open_splits(plain.data)) == plan_cache(listed.data, open_splits(listed.data))
    data = prepare_data(plain.data, splits=("valid",))
    assert data.tokenizers.src.piece_id(lang_tag("de")) is None
    assert not data.splits["valid"].pairs.any()
    several = small_demo(tmp_path, "data.pairs=[en-de,en-fr]")
    root = lambda cfg: plan_cache(cfg.data, open_splits(cfg.data)).root
    assert root(several) != root(plain)


def test_a_given_tokenizer_must_hold_every_target_tag(multi, tmp_path: Path) -> None:
    """data.tokenizer for several targets: one without their tags is refused by name; one with them is reused."""
    cfg, data = multi
    one_pair = prepare_data(small_demo(tmp_path).data, splits=("valid",))
    given = f"data.tokenizer={one_pair.cache_dir / 'tokenizer'}"
    prepare_data(small_demo(tmp_path, given).data, splits=("valid",))  # cached for one pair: checked again below
    with pytest.raises(DataError, match=r"data.tokenizer=.*lacks the target tags \['>>de<<', '>>fr<<'\]"):
        prepare_data(small_demo(tmp_path, "data.pairs=[en-de,en-fr]", given).data, splits=("valid",))
    tagged = f"data.tokenizer={data.cache_dir / 'tokenizer'}"
    again = prepare_data(small_demo(tmp_path, "data.pairs=[en-de,en-fr]", tagged).data, splits=("valid",))
    assert again.splits["valid"].src_ids(0) == data.splits["valid"].src_ids(0)


def test_several_targets_need_one_joint_vocabulary(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="joint_vocab"):
        small_demo(tmp_path, "data.pairs=[en-de,en-fr]", "data.joint_vocab=false")
    with pytest.raises(DataError, match="demo corpus"):
        prepare_data(small_demo(tmp_path, "data.pairs=[en-de,en-ja]").data)


def test_subword_sampling_keeps_each_sources_tag(multi) -> None:
    from mt.data import subword_sampling

    cfg, data = multi
    sampling = subword_sampling(replace(cfg.data, subword_sampling=0.3), data.tokenizers, max_positions=256)
    train = data.splits["train"]
    rows = [0, 1, len(train) - 2, len(train) - 1]  # both pairs
    batch = sampling.collate(train, rows, key=(1, 0, 0, 0))[0]
    firsts = {int(i): int(src[0]) for i, src in zip(batch.ids, batch.src, strict=True)}
    assert firsts == {i: train.src_ids(i)[0] for i in rows}


def test_the_data_summary_counts_each_language_pair(multi, capsys) -> None:
    cfg, _ = multi
    prepare_data(cfg.data)  # cached by now: the summary only
    n = cfg.data.demo
    expected = f"{n.train_size}/{n.valid_size}/{n.test_size}"
    assert f"(train/valid/test examples): en-de {expected}, en-fr {expected}" in capsys.readouterr().out
