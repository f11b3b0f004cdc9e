"""Sources: file formats, the hub path (against local directories), the demo corpus, bad-input errors."""

from __future__ import annotations

import gzip
import json
import random
from dataclasses import replace
from pathlib import Path

import datasets
import pytest

from mt.config import DataConfig, DemoConfig, HubConfig
from mt.data import DataError, check_line_counts, demo_numbers, open_split, prepare_data, write_demo_corpus
from mt.data.demo import demo_line, demo_pair

PAIRS = [("Hello world.", "Hallo Welt."), ("Two dogs run.", "Zwei Hunde rennen."), ("Ünïcödé ✓", "Ünïcödé ✓")]


def _files_cfg(directory: Path, cache: Path, **kw: object) -> DataConfig:
    return DataConfig(source="files", dir=str(directory), cache_dir=str(cache), **kw)  # type: ignore[arg-type]


def _write(path: Path, lines: list[str], gz: bool = False) -> Path:
    data = "".join(line + "\n" for line in lines).encode()
    if gz:
        path = path.with_name(path.name + ".gz")
        path.write_bytes(gzip.compress(data))
    else:
        path.write_bytes(data)
    return path


def _rows(ds: datasets.Dataset) -> list[tuple[str, str]]:
    return list(zip(ds["src"], ds["tgt"], strict=True))


# ------------------------------------------------------------------------------------------- formats


def test_parallel_gz_multi30k_val(multi30k_dir: Path, tmp_path: Path) -> None:
    cfg = _files_cfg(multi30k_dir, tmp_path, train_prefix="val")
    ds = open_split(cfg, "train", tmp_path).load()
    with gzip.open(multi30k_dir / "val.en.gz", "rt", encoding="utf-8") as f:
        en = f.read().split("\n")[:-1]
    assert len(ds) == len(en) == 1014
    assert ds["src"][:] == en
    assert ds["tgt"][0] == "Eine Gruppe von Männern lädt Baumwolle auf einen Lastwagen"


def test_tsv_and_jsonl(tmp_path: Path) -> None:
    _write(tmp_path / "train.tsv", [f"{s}\t{t}" for s, t in PAIRS], gz=True)
    rows = [
        {"en": s, "de": t} if i % 2 else {"translation": {"en": s, "de": t, "fr": "x"}}
        for i, (s, t) in enumerate(PAIRS)
    ]
    _write(tmp_path / "train.jsonl", [json.dumps(r, ensure_ascii=False) for r in rows])
    for fmt in ("tsv", "jsonl"):
        ds = open_split(_files_cfg(tmp_path, tmp_path / "cache", format=fmt), "train", tmp_path / "cache").load()
        assert _rows(ds) == PAIRS, fmt
    reversed_cfg = _files_cfg(tmp_path, tmp_path / "cache", format="jsonl", src_lang="de", tgt_lang="en")
    assert _rows(open_split(reversed_cfg, "train", tmp_path / "cache").load()) == [(t, s) for s, t in PAIRS]


def test_tsv_and_jsonl_bad_lines(tmp_path: Path) -> None:
    _write(tmp_path / "train.tsv", ["a\tb", "only one field"])
    _write(tmp_path / "train.jsonl", ['{"en": "a", "de": "b"}', '{"en": "a"}'])
    with pytest.raises(DataError, match=r"train\.tsv:2: expected 2 tab-separated fields"):
        open_split(_files_cfg(tmp_path, tmp_path / "c", format="tsv"), "train", tmp_path / "c").load()
    with pytest.raises(DataError, match=r"train\.jsonl:2: expected string fields 'en' and 'de'"):
        open_split(_files_cfg(tmp_path, tmp_path / "c", format="jsonl"), "train", tmp_path / "c").load()


# ----------------------------------------------------------------------------------------- bad input


def test_mismatched_line_counts_name_both_files_and_counts(tmp_path: Path) -> None:
    src = _write(tmp_path / "train.en", ["a", "b", "c"])
    tgt = _write(tmp_path / "train.de", ["x", "y"])
    with pytest.raises(DataError, match="line counts differ") as err:
        open_split(_files_cfg(tmp_path, tmp_path / "c"), "train", tmp_path / "c").load()
    assert f"{src} has 3 lines" in str(err.value) and f"{tgt} has 2 lines" in str(err.value)
    _write(tmp_path / "train.de", ["x", "y", "z", "w"])  # the other way round
    with pytest.raises(DataError, match=r"has 3 lines, .*train\.de has 4 lines"):
        open_split(_files_cfg(tmp_path, tmp_path / "c"), "train", tmp_path / "c").load()


def test_invalid_utf8_names_file_and_line(tmp_path: Path) -> None:
    _write(tmp_path / "train.en", ["fine", "also fine", "fine"])
    bad = tmp_path / "train.de.gz"
    bad.write_bytes(gzip.compress(b"gut\nauch gut\nkaputt \xff\xfe\n"))
    with pytest.raises(DataError, match=r"train\.de\.gz:3: invalid UTF-8 \(byte 0xff at column 8\)"):
        open_split(_files_cfg(tmp_path, tmp_path / "c"), "train", tmp_path / "c").load()


def test_bad_json_line_names_file_line_and_column(tmp_path: Path) -> None:
    _write(tmp_path / "train.jsonl", ['{"en": "a", "de": "b"}', "", '{"en": "a", "de": }'])
    with pytest.raises(DataError, match=r"train\.jsonl:3: invalid JSON \(Expecting value at column 19\)"):
        open_split(_files_cfg(tmp_path, tmp_path / "c", format="jsonl"), "train", tmp_path / "c").load()


_TRUNCATED = gzip.compress(b"".join(b"%d\t%d\n" % (i * 7919 % 10007, i) for i in range(20_000)))[:5000]


@pytest.mark.parametrize("payload", [bytes(range(256)) * 8, _TRUNCATED], ids=["random bytes", "truncated"])
@pytest.mark.parametrize("fmt", ["parallel", "tsv"])  # counted first / read by the datasets generator
def test_corrupt_gzip_is_a_data_error_naming_the_file(tmp_path: Path, payload: bytes, fmt: str) -> None:
    bad = tmp_path / ("train.en.gz" if fmt == "parallel" else "train.tsv.gz")
    bad.write_bytes(payload)
    _write(tmp_path / "train.de", ["x"])
    with pytest.raises(DataError, match=rf"^{bad}: corrupt or truncated gzip file after line \d+ \(") as err:
        open_split(_files_cfg(tmp_path, tmp_path / "c", format=fmt), "train", tmp_path / "c").load()
    assert ("after line 0 " in str(err.value)) == (payload != _TRUNCATED)


def test_line_counts_are_compared_before_any_text_is_converted(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    _write(tmp_path / "train.en", ["a"] * 1000, gz=True)
    _write(tmp_path / "train.de", ["b"] * 999)

    def no_conversion(*args: object, **kwargs: object) -> None:
        raise AssertionError("text was read into Arrow before the line counts were compared")

    monkeypatch.setattr(datasets.Dataset, "from_generator", no_conversion)
    with pytest.raises(DataError, match=r"train\.en\.gz has 1000 lines, .*train\.de has 999 lines; line n of"):
        open_split(_files_cfg(tmp_path, tmp_path / "c"), "train", tmp_path / "c").load()


def test_directory_instead_of_a_file_and_missing_data_dir(tmp_path: Path) -> None:
    (tmp_path / "train.en").mkdir()
    _write(tmp_path / "train.de", ["x"])
    with pytest.raises(DataError, match=rf"^{tmp_path / 'train.en'} is a directory, expected a data file$"):
        open_split(_files_cfg(tmp_path, tmp_path / "c"), "train", tmp_path / "c")
    with pytest.raises(DataError, match=rf"^data.dir={tmp_path / 'nowhere'}: no such directory$"):
        open_split(_files_cfg(tmp_path / "nowhere", tmp_path / "c"), "train", tmp_path / "c")


def test_unreadable_file_names_it(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    _write(tmp_path / "train.en", ["a"])
    _write(tmp_path / "train.de", ["b"])

    def denied(path: object, mode: str = "r") -> None:
        raise PermissionError(13, "Permission denied", str(path))

    monkeypatch.setattr("mt.data.sources.open", denied, raising=False)  # the tests run as root: chmod won't do
    with pytest.raises(DataError, match=rf"^{tmp_path / 'train.en'}: cannot read \(Permission denied\)$"):
        open_split(_files_cfg(tmp_path, tmp_path / "c"), "train", tmp_path / "c")


def test_missing_file_names_path(tmp_path: Path) -> None:
    _write(tmp_path / "train.en", ["a"])
    with pytest.raises(DataError, match=f"missing data file: {tmp_path / 'train.de'}"):
        open_split(_files_cfg(tmp_path, tmp_path / "c"), "train", tmp_path / "c")


def test_empty_split(tmp_path: Path) -> None:
    _write(tmp_path / "train.en", [])
    _write(tmp_path / "train.de", [])
    with pytest.raises(DataError, match=r"split 'train' is empty: .*train\.en"):
        open_split(_files_cfg(tmp_path, tmp_path / "c"), "train", tmp_path / "c").load()


def test_bad_valid_split_fails_before_tokenizer_training(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    for prefix in ("train", "test"):
        _write(tmp_path / f"{prefix}.en", [s for s, _ in PAIRS])
        _write(tmp_path / f"{prefix}.de", [t for _, t in PAIRS])
    _write(tmp_path / "val.en", ["a", "b"])
    _write(tmp_path / "val.de", ["a"])

    def no_training(*args: object, **kwargs: object) -> None:
        raise AssertionError("the tokenizer was trained before the input was validated")

    monkeypatch.setattr("mt.data.binarize.train_tokenizers", no_training)
    with pytest.raises(DataError, match=r"val\.en has 2 lines, .*val\.de has 1 line\b"):
        prepare_data(_files_cfg(tmp_path, tmp_path / "c", valid_prefix="val", vocab_size=40))
    assert [p.name for p in (tmp_path / "c").iterdir()] == ["hf"]  # nothing under a <fingerprint>/ entry


# ------------------------------------------------------------------------------------------------ hub


def _translation_dict(pairs: list[tuple[str, str]]) -> dict[str, list[dict[str, str]]]:
    return {"translation": [{"en": s, "de": t} for s, t in pairs]}


def test_hub_path_with_save_to_disk_dir(tmp_path: Path) -> None:
    splits = {"train": PAIRS * 4, "validation": PAIRS[:2], "test": PAIRS[1:]}
    datasets.DatasetDict({k: datasets.Dataset.from_dict(_translation_dict(v)) for k, v in splits.items()}).save_to_disk(
        str(tmp_path / "hubdir")
    )
    cfg = DataConfig(
        source="hub",
        hub=HubConfig(name=str(tmp_path / "hubdir")),
        vocab_size=60,
        cache_dir=str(tmp_path / "c"),
    )
    data = prepare_data(cfg)
    assert list(data.splits["valid"].src_text) == [s for s, _ in PAIRS[:2]]
    assert list(data.splits["test"].tgt_text) == [t for _, t in PAIRS[1:]]
    tok = data.tokenizers.tgt
    assert [tok.decode(data.splits["test"].tgt_ids(i)) for i in range(2)] == [t for _, t in PAIRS[1:]]


def test_hub_path_with_load_dataset_on_local_json_dir(tmp_path: Path) -> None:
    hub = tmp_path / "jsonhub"
    hub.mkdir()
    for name, pairs in (("train", PAIRS), ("validation", PAIRS[:1]), ("test", PAIRS[2:])):
        _write(hub / f"{name}.jsonl", [json.dumps({"translation": {"en": s, "de": t}}) for s, t in pairs])
    cfg = DataConfig(source="hub", hub=HubConfig(name=str(hub)), cache_dir=str(tmp_path / "c"))
    ds = open_split(cfg, "test", tmp_path / "c").load()
    assert _rows(ds) == PAIRS[2:]
    with pytest.raises(DataError, match="cannot load split 'nope'"):
        open_split(replace(cfg, hub=HubConfig(name=str(hub), test_split="nope")), "test", tmp_path / "c")


# ----------------------------------------------------------------------------------------------- demo

SMALL_DEMO = DemoConfig(
    train_size=300, valid_size=40, test_size=40, min_number=0, max_number=2000, max_numbers_per_line=1, seed=7
)


def test_demo_pair() -> None:
    assert demo_pair(21) == ("twenty-one", "einundzwanzig")


def test_demo_corpus_deterministic_and_disjoint_by_number(tmp_path: Path) -> None:
    first = write_demo_corpus(SMALL_DEMO, tmp_path / "a")
    random.seed(12345)  # the global RNG must not matter
    second = write_demo_corpus(SMALL_DEMO, tmp_path / "b")
    files = sorted(p.name for p in first.iterdir() if p.name != "DONE")
    assert files == [f"{s}.{lang}" for s in ("test", "train", "valid") for lang in ("de", "en")]
    assert all((first / f).read_bytes() == (second / f).read_bytes() for f in files)

    numbers = {k: [n for (n,) in lines] for k, lines in demo_numbers(SMALL_DEMO).items()}  # one per line
    assert {k: len(v) for k, v in numbers.items()} == {"train": 300, "valid": 40, "test": 40}
    sets = {k: set(v) for k, v in numbers.items()}
    assert sum(map(len, sets.values())) == len(set.union(*sets.values())) == 380  # disjoint, no repeats
    assert all(0 <= n <= 2000 for n in set.union(*sets.values()))
    assert numbers != demo_numbers(replace(SMALL_DEMO, seed=8))
    english = (first / "valid.en").read_text().splitlines()
    assert english == [demo_pair(n)[0] for n in numbers["valid"]]


def test_demo_lines_list_several_numbers_disjoint_across_splits() -> None:
    cfg = replace(SMALL_DEMO, max_numbers_per_line=3)
    lines = demo_numbers(cfg)
    counts = [len(line) for split in lines.values() for line in split]
    assert min(counts) == 1 and max(counts) == 3
    numbers = {k: [n for line in v for n in line] for k, v in lines.items()}
    union = set().union(*map(set, numbers.values()))
    assert len(union) == sum(map(len, numbers.values()))  # no number twice, in or across splits
    assert demo_line((21, 405)) == ("twenty-one; four hundred and five", "einundzwanzig; vierhundertfünf")


def test_demo_too_small_range(tmp_path: Path) -> None:
    with pytest.raises(DataError, match="needs 380 distinct numbers"):
        demo_numbers(replace(SMALL_DEMO, max_number=100))


def test_demo_source_end_to_end(tmp_path: Path) -> None:
    cfg = DataConfig(source="demo", demo=SMALL_DEMO, vocab_size=256, max_len=64, cache_dir=str(tmp_path))
    data = prepare_data(cfg, splits=("valid",))
    valid = data.splits["valid"]
    assert list(valid.src_text) == [demo_pair(n)[0] for (n,) in demo_numbers(SMALL_DEMO)["valid"]]
    assert all(data.tokenizers.tgt.decode(valid.tgt_ids(i)) == valid.tgt_text[i] for i in range(len(valid)))


def test_check_line_counts_counts_like_wc(tmp_path: Path) -> None:
    src = tmp_path / "x.en"
    src.write_bytes("one\u2028still one\r\ntwo\x0cstill two\n".encode())  # str.splitlines() sees 4
    ref = _write(tmp_path / "x.de", ["eins", "zwei"], gz=True)
    check_line_counts(src, ref)  # equal: no error
    _write(tmp_path / "x.de", ["eins"], gz=True)
    with pytest.raises(DataError, match=rf"^line counts differ: {src} has 2 lines, {ref} has 1 line;"):
        check_line_counts(str(src), str(ref))
