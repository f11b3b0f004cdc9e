"""Several training files (``data.train_prefix=[a,b]``) read in order as one split, as WMT14 ships them."""

from __future__ import annotations

import gzip
from dataclasses import replace
from pathlib import Path

import pytest

from mt.config import ConfigError, DataConfig, compose
from mt.data import DataError, open_split
from mt.data.sources import split_files, train_prefixes

EUROPARL = [("Resumption of the session", "Wiederaufnahme der Sitzungsperiode"), ("Thank you.", "Danke.")]
CRAWL = [("A cat sleeps.", "Eine Katze schläft."), ("Two dogs run.", "Zwei Hunde rennen."), ("Yes", "Ja")]


def _write(path: Path, lines: list[str]) -> None:
    data = "".join(line + "\n" for line in lines).encode()
    path.write_bytes(gzip.compress(data) if path.suffix == ".gz" else data)


def _pair(directory: Path, prefix: str, pairs: list[tuple[str, str]], gz: bool = False) -> None:
    ext = ".gz" if gz else ""
    _write(directory / f"{prefix}.en{ext}", [s for s, _ in pairs])
    _write(directory / f"{prefix}.de{ext}", [t for _, t in pairs])


def _cfg(directory: Path, prefixes: object) -> DataConfig:
    return DataConfig(source="files", dir=str(directory), cache_dir=str(directory / "cache"), train_prefix=prefixes)


def _rows(cfg: DataConfig) -> list[tuple[str, str]]:
    ds = open_split(cfg, "train", Path(cfg.cache_dir)).load()
    return list(zip(ds["src"], ds["tgt"], strict=True))


def test_two_pairs_read_as_one_split_in_order(tmp_path: Path) -> None:
    _pair(tmp_path, "europarl", EUROPARL, gz=True)
    _pair(tmp_path, "commoncrawl", CRAWL)
    assert _rows(_cfg(tmp_path, ["europarl", "commoncrawl"])) == EUROPARL + CRAWL
    assert _rows(_cfg(tmp_path, ["commoncrawl", "europarl"])) == CRAWL + EUROPARL  # the order given
    assert _rows(_cfg(tmp_path, "commoncrawl")) == CRAWL  # a single string keeps working
    assert [p.name for p in split_files(_cfg(tmp_path, ["europarl", "commoncrawl"]), "train")] == [
        "europarl.en.gz", "europarl.de.gz", "commoncrawl.en", "commoncrawl.de"
    ]


def test_list_as_a_hydra_override_and_a_plain_string(tmp_path: Path) -> None:
    cfg = compose(["data=multi30k", f"data.dir={tmp_path}", "data.train_prefix=[europarl,commoncrawl]"])
    assert cfg.data.train_prefix == ["europarl", "commoncrawl"]
    assert train_prefixes(cfg.data) == ["europarl", "commoncrawl"]
    plain = compose(["data=multi30k", "data.train_prefix=train"])
    assert train_prefixes(plain.data) == ["train"]
    for bad in ("[]", "3", "[a,'']"):
        with pytest.raises(ConfigError, match=r"data\.train_prefix=.*must be a file prefix or a non-empty list"):
            compose(["data=multi30k", f"data.train_prefix={bad}"])
    with pytest.raises(ConfigError, match=r"data\.train_prefix=\[\]"):  # a DataConfig built in code
        train_prefixes(_cfg(tmp_path, []))


def test_line_count_mismatch_names_both_files_of_the_second_pair(tmp_path: Path) -> None:
    _pair(tmp_path, "europarl", EUROPARL)
    _write(tmp_path / "commoncrawl.en", [s for s, _ in CRAWL])
    _write(tmp_path / "commoncrawl.de", [t for _, t in CRAWL[:2]])
    with pytest.raises(DataError) as e:
        open_split(_cfg(tmp_path, ["europarl", "commoncrawl"]), "train", tmp_path / "cache").load()
    message = str(e.value)
    assert "commoncrawl.en has 3 lines" in message and "commoncrawl.de has 2 lines" in message
    assert "europarl" not in message


def test_invalid_utf8_names_the_file_and_line_of_the_second_pair(tmp_path: Path) -> None:
    _pair(tmp_path, "europarl", EUROPARL)
    _pair(tmp_path, "commoncrawl", CRAWL)
    (tmp_path / "commoncrawl.de").write_bytes(b"Eine Katze\nZwei Hunde \xe4\nJa\n")
    with pytest.raises(DataError, match=r"commoncrawl\.de:2: invalid UTF-8"):
        open_split(_cfg(tmp_path, ["europarl", "commoncrawl"]), "train", tmp_path / "cache").load()


def test_missing_file_of_a_later_prefix_is_named(tmp_path: Path) -> None:
    _pair(tmp_path, "europarl", EUROPARL)
    with pytest.raises(DataError, match=r"missing data file: .*news_commentary\.en"):
        open_split(_cfg(tmp_path, ["europarl", "news_commentary"]), "train", tmp_path / "cache")


def test_fingerprint_covers_every_file(tmp_path: Path) -> None:
    _pair(tmp_path, "europarl", EUROPARL)
    _pair(tmp_path, "commoncrawl", CRAWL)
    cfg = _cfg(tmp_path, ["europarl", "commoncrawl"])
    key = open_split(cfg, "train", tmp_path / "cache").key
    assert open_split(cfg, "train", tmp_path / "cache").key == key  # stable
    assert open_split(replace(cfg, train_prefix=["commoncrawl", "europarl"]), "train", tmp_path / "cache").key != key
    assert open_split(replace(cfg, train_prefix="europarl"), "train", tmp_path / "cache").key != key
    _write(tmp_path / "commoncrawl.de", ["Eine Katze schläft.", "Zwei Hunde rennen.", "Jawohl"])  # 2nd pair's tgt
    changed = open_split(cfg, "train", tmp_path / "cache")
    assert changed.key != key
    assert changed.load()["tgt"][-1] == "Jawohl"  # the cached Arrow of the old content is not reused
