"""prepare_data: binarized splits, train-only filtering, the summary, and cache reuse."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest
import torch

from mt.config import DataConfig
from mt.data import DataError, PreparedData, binarize, prepare_data

PAIRS = [
    ("a small house", "a small house"),  # same text both sides: ratio 1
    ("", "leer"),  # empty source
    (" ".join(["word"] * 60), " ".join(["Wort"] * 60)),  # too long for max_len=50
    ("yes", " ".join(["ja"] * 15)),  # length ratio above 3 (at most 4 pieces vs at least 15)
    ("the red ball", "the red ball"),
]


def _val_cfg(multi30k_dir: Path, cache: Path, **kw: object) -> DataConfig:
    cfg = DataConfig(
        source="files", dir=str(multi30k_dir), train_prefix="val", valid_prefix="val",
        test_prefix="test_2016_flickr", vocab_size=1000, cache_dir=str(cache),
    )  # fmt: skip
    return replace(cfg, **kw)  # type: ignore[arg-type]


@pytest.fixture(scope="module")
def cache(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("cache")


@pytest.fixture(scope="module")
def data(multi30k_dir: Path, cache: Path) -> PreparedData:
    return prepare_data(_val_cfg(multi30k_dir, cache))


def test_splits_ids_lengths_and_text(data: PreparedData, cache: Path) -> None:
    assert set(data.splits) == {"train", "valid", "test"}
    valid, test = data.splits["valid"], data.splits["test"]
    assert (len(valid), len(test)) == (1014, 1000)
    assert valid.name == "valid"
    assert valid.src_lens.dtype == torch.long and valid.src_lens.shape == (1014,)
    tok = data.tokenizers
    assert tok.joint and tok.src is tok.tgt
    for i in (0, 517, 1013):
        assert valid.src_ids(i) == tok.src.encode(valid.src_text[i])
        assert valid.tgt_ids(i) == tok.tgt.encode(valid.tgt_text[i])
        assert valid.src_lens[i] == len(valid.src_ids(i)) and valid.tgt_lens[i] == len(valid.tgt_ids(i))
    assert valid.src_text[0] == "A group of men are loading cotton onto a truck"
    assert test.tgt_text[-1] == list(test.tgt_text)[-1]
    assert data.cache_dir.parent == cache and (data.cache_dir / "tokenizer" / "spm.model").is_file()


def test_second_call_reuses_tokenizer_and_splits(
    data: PreparedData,
    multi30k_dir: Path,
    cache: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    def fail(*args: object, **kwargs: object) -> None:
        raise AssertionError("re-trained or re-encoded although the cache was valid")

    monkeypatch.setattr("mt.data.binarize.train_tokenizers", fail)
    monkeypatch.setattr("mt.data.binarize.binarize_split", fail)
    again = prepare_data(_val_cfg(multi30k_dir, cache))
    assert again.cache_dir == data.cache_dir
    assert again.tokenizers.src.model_proto == data.tokenizers.src.model_proto
    assert torch.equal(again.splits["test"].tgt_lens, data.splits["test"].tgt_lens)
    assert capsys.readouterr().out.count("(cached)") == 3
    with pytest.raises(AssertionError, match="re-trained"):  # other tokenizer settings: a new fingerprint
        prepare_data(_val_cfg(multi30k_dir, cache, vocab_size=800))


def test_separate_vocabularies(multi30k_dir: Path, cache: Path) -> None:
    data = prepare_data(_val_cfg(multi30k_dir, cache, joint_vocab=False, vocab_size=600), splits=("valid",))
    src, tgt = data.tokenizers.src, data.tokenizers.tgt
    assert not data.tokenizers.joint and src is not tgt and src.model_proto != tgt.model_proto
    valid = data.splits["valid"]
    assert all(src.decode(valid.src_ids(i)) == valid.src_text[i] for i in range(len(valid)))
    assert all(tgt.decode(valid.tgt_ids(i)) == valid.tgt_text[i] for i in range(len(valid)))


def test_filtering_train_only(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    for prefix in ("train", "valid", "test"):
        (tmp_path / f"{prefix}.en").write_text("".join(s + "\n" for s, _ in PAIRS))
        (tmp_path / f"{prefix}.de").write_text("".join(t + "\n" for _, t in PAIRS))
    cfg = DataConfig(source="files", dir=str(tmp_path), valid_prefix="valid", vocab_size=40, max_len=50,
                     max_len_ratio=3.0, cache_dir=str(tmp_path / "cache"))  # fmt: skip
    data = prepare_data(cfg)
    lens = [(len(data.tokenizers.src.encode(s)), len(data.tokenizers.tgt.encode(t))) for s, t in PAIRS]
    assert lens[1][0] == 0 and min(lens[2]) > 50 and 3 * min(lens[3]) < max(lens[3]) <= 50
    train = data.splits["train"]
    assert list(train.src_text) == ["a small house", "the red ball"]
    assert len(data.splits["valid"]) == len(data.splits["test"]) == len(PAIRS)
    assert "3 (empty 1, too_long 1, ratio 1)" in capsys.readouterr().out


def test_vocab_too_large_through_prepare_data(tmp_path: Path) -> None:
    for side, text in (("en", "one two"), ("de", "eins zwei")):
        (tmp_path / f"train.{side}").write_text(text + "\n")
    cfg = DataConfig(source="files", dir=str(tmp_path), vocab_size=8000, cache_dir=str(tmp_path / "c"))
    with pytest.raises(DataError, match="vocabulary of 8000 pieces is larger than the training data supports"):
        prepare_data(cfg, splits=("train",))
    assert [p.name for p in (tmp_path / "c").iterdir()] == ["hf"]  # only the text; no <fingerprint>/ entry


@pytest.mark.parametrize("fault", [RuntimeError, KeyboardInterrupt])
def test_a_failure_midway_leaves_only_complete_cache_entries(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, fault: type[BaseException]
) -> None:
    for prefix in ("train", "valid", "test"):
        (tmp_path / f"{prefix}.en").write_text("".join(s + "\n" for s, _ in PAIRS))
        (tmp_path / f"{prefix}.de").write_text("".join(t + "\n" for _, t in PAIRS))
    (tmp_path / "valid.en").write_text("boom\n" * len(PAIRS))
    cfg = DataConfig(source="files", dir=str(tmp_path), valid_prefix="valid", vocab_size=40,
                     cache_dir=str(tmp_path / "cache"))  # fmt: skip
    real_encode = binarize._encode

    def encode_until_boom(batch: dict[str, list[str]], **kwargs: object) -> dict[str, list[list[int]]]:
        if "boom" in batch["src"]:  # the valid split, after the tokenizer and the train split were written
            raise fault("disk full")
        return real_encode(batch, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(binarize, "_encode", encode_until_boom)
    with pytest.raises(fault, match="disk full"):
        prepare_data(cfg)
    (root,) = [p for p in (tmp_path / "cache").iterdir() if p.name != "hf"]
    entries = sorted(p.name for p in root.iterdir())
    assert entries[0] == "tokenizer" and entries[1].startswith("train-") and len(entries) == 2  # no temporaries
    assert (root / entries[1] / "stats.json").is_file() and (root / "tokenizer" / "spm.model").is_file()

    monkeypatch.setattr(binarize, "_encode", real_encode)
    monkeypatch.setattr(binarize, "train_tokenizers", lambda *a: pytest.fail("the complete tokenizer was rebuilt"))
    data = prepare_data(cfg)  # reuses the complete entries, builds the rest
    assert list(data.splits["valid"].src_text) == ["boom"] * len(PAIRS)
    assert len(list(root.iterdir())) == 4


def test_parallel_binarization_matches_single_process(
    data: PreparedData, multi30k_dir: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr("mt.data.binarize._PARALLEL_MIN_ROWS", 1)  # val is small: force num_proc=2
    parallel = prepare_data(_val_cfg(multi30k_dir, tmp_path, num_workers=2), splits=("test",)).splits["test"]
    single = data.splits["test"]
    assert torch.equal(parallel.src_lens, single.src_lens) and torch.equal(parallel.tgt_lens, single.tgt_lens)
    assert all(parallel.tgt_ids(i) == single.tgt_ids(i) for i in range(len(single)))
    assert list(parallel.src_text) == list(single.src_text)


def test_a_given_tokenizer_is_reused_not_trained(
    data: PreparedData, multi30k_dir: Path, cache: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """data.tokenizer: another run's vocabulary encodes other training text (no tokenizer is trained); its
    cache key is the tokenizer's content, so the same files under another name share the cache entry."""
    def fail(*args: object, **kwargs: object) -> None:
        raise AssertionError("trained a tokenizer although data.tokenizer gives one")

    monkeypatch.setattr("mt.data.binarize.train_tokenizers", fail)
    given = data.cache_dir / "tokenizer"
    other = _val_cfg(multi30k_dir, cache, train_prefix="test_2016_flickr", vocab_size=800, tokenizer=str(given))
    reused = prepare_data(other, splits=("train", "valid"))
    assert reused.tokenizers.src.model_proto == data.tokenizers.src.model_proto
    assert reused.cache_dir != data.cache_dir and (reused.cache_dir / "tokenizer" / "spm.model").is_file()
    train = reused.splits["train"]
    assert len(train) == 1000 and train.tgt_ids(5) == data.tokenizers.tgt.encode(train.tgt_text[5])
    assert torch.equal(reused.splits["valid"].src_lens, data.splits["valid"].src_lens)
    copy = tmp_path / "copy"
    copy.mkdir()
    (copy / "spm.model").write_bytes((given / "spm.model").read_bytes())
    assert prepare_data(replace(other, tokenizer=str(copy)), splits=("valid",)).cache_dir == reused.cache_dir


def test_a_given_tokenizer_that_is_not_there_is_named(multi30k_dir: Path, cache: Path, tmp_path: Path) -> None:
    with pytest.raises(DataError, match=r"data.tokenizer=.*empty: no tokenizer there \(spm.model, or src.model"):
        prepare_data(_val_cfg(multi30k_dir, cache, tokenizer=str(tmp_path / "empty")), splits=("valid",))
