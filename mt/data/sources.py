"""Where parallel text comes from: local files (parallel, TSV, JSONL), a hub dataset, or the demo corpus.

The training split of local files may be several prefixes (``data.train_prefix=[europarl,commoncrawl]``),
read in order as one split; its content key covers every file. Whatever the source and format, the training
split may end with parallel files of their own (``data.extra_train``: ``PREFIX.SRC`` / ``PREFIX.TGT``, e.g. a
distillation's translations, ``mt.train.distill``); its content key then covers them too.

Every source ends as a ``datasets.Dataset`` with string columns ``src`` and ``tgt`` (Arrow, memory-mapped,
cached by fingerprint under ``<cache_dir>/hf``). Bad input is rejected here, at the boundary, with a
``DataError`` that names the file and line, before any tokenizer training or binarization happens. Text is
read line by line by ``mt.data.lines`` (bytes split on ``\\n`` only, strict UTF-8).
"""

from __future__ import annotations

import hashlib
import json
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import datasets

from mt.config import ConfigError, DataConfig
from mt.config_rules import TRAIN_PREFIX_RULE
from mt.data.errors import DataError
from mt.data.formats import check_line_counts, jsonl_pairs, parallel_pairs, pick_languages, tsv_pairs

SPLITS = ("train", "valid", "test")
_FEATURES = datasets.Features({"src": datasets.Value("string"), "tgt": datasets.Value("string")})
_READER_VERSION = 2  # bump when the way text is read changes, to invalidate cached Arrow files


def fingerprint(*parts: Any) -> str:
    """A short stable hash of JSON-serialisable parts (cache keys)."""
    blob = json.dumps(parts, sort_keys=True, default=str).encode()
    return hashlib.sha256(blob).hexdigest()[:16]


def file_digest(path: Path) -> str:
    """Content hash of a file's raw bytes (of the compressed bytes for ``.gz``: cheap and exact)."""
    try:
        with open(path, "rb") as f:
            return hashlib.file_digest(f, "sha256").hexdigest()[:16]
    except OSError as e:
        raise DataError(f"{path}: cannot read ({e.strerror or e})") from None


@contextmanager
def progress_bars_on_tty() -> Iterator[None]:
    """Silence datasets' progress bars while stderr is not a terminal (tests, logs); restore them after."""
    quiet = not sys.stderr.isatty() and not datasets.are_progress_bars_disabled()
    if quiet:
        datasets.disable_progress_bars()
    try:
        yield
    finally:
        if quiet:
            datasets.enable_progress_bars()


@dataclass(frozen=True)
class RawSplit:
    """One split of a source, not yet read: ``key`` identifies its content, ``load()`` reads and validates."""

    name: str
    key: str
    description: str
    _cfg: DataConfig
    _cache_root: Path
    # when given, the split is these read one after another (the source's, then ``data.extra_train``'s files)
    parts: tuple[RawSplit, ...] = ()

    def load(self) -> datasets.Dataset:
        """Read the split into a ``Dataset`` (columns ``src``, ``tgt``); raises ``DataError`` on bad input."""
        if self.parts:
            return datasets.concatenate_datasets([part.load() for part in self.parts])
        with progress_bars_on_tty():
            if self._cfg.source == "hub":
                ds = _load_hub(self._cfg, self.name, self._cache_root)
            else:
                ds = _load_files(self._cfg, self.name, self.key, self._cache_root)
        if len(ds) == 0:
            raise DataError(f"split '{self.name}' is empty: {self.description}")
        return ds


def open_split(cfg: DataConfig, split: str, cache_root: Path) -> RawSplit:
    """Locate one split of ``cfg``'s source and compute its content key (files must exist); the training
    split ends with ``data.extra_train``'s files, and its key then covers them (without them it is unchanged)."""
    raw = _open_source_split(cfg, split, cache_root)
    extra = extra_train_config(cfg) if split == "train" else None
    if extra is None:
        return raw
    try:
        more = _open_source_split(extra, split, cache_root)
    except DataError as e:
        raise DataError(f"data.extra_train={_prefixes(cfg.extra_train)}: {e}") from None
    key = fingerprint(raw.key, "extra_train", more.key)
    return RawSplit(split, key, f"{raw.description} + {more.description}", cfg, cache_root, parts=(raw, more))


def extra_train_config(cfg: DataConfig) -> DataConfig | None:
    """``data.extra_train`` as a config of its own: parallel files ``PREFIX.SRC`` / ``PREFIX.TGT`` (plain or
    ``.gz``), each prefix absolute or relative to the working directory; None when there are none."""
    if not cfg.extra_train:
        return None
    return replace(cfg, source="files", format="parallel", dir=".", train_prefix=list(cfg.extra_train),
                   extra_train=[])


def _prefixes(values: list[str]) -> str:
    return "[" + ",".join(values) + "]"


def _open_source_split(cfg: DataConfig, split: str, cache_root: Path) -> RawSplit:
    """``open_split`` without ``data.extra_train``: the split of the source itself."""
    if split not in SPLITS:
        raise DataError(f"unknown split '{split}', expected one of {SPLITS}")
    if cfg.source == "demo":
        from mt.data.demo import DEMO_TARGETS, write_demo_corpus

        langs = {cfg.src_lang, cfg.tgt_lang}
        if "en" not in langs or not langs - {"en"} <= set(DEMO_TARGETS):
            raise DataError(
                f"the demo corpus is en<->{'|'.join(DEMO_TARGETS)}, got src_lang={cfg.src_lang} tgt_lang={cfg.tgt_lang}"
            )
        demo_dir = write_demo_corpus(cfg.demo, cache_root / "demo", languages=(cfg.src_lang, cfg.tgt_lang))
        cfg = replace(
            cfg,
            source="files",
            format="parallel",
            dir=str(demo_dir),
            train_prefix="train",
            valid_prefix="valid",
            test_prefix="test",
        )
    if cfg.source == "files":
        paths = split_files(cfg, split)
        key = fingerprint(_READER_VERSION, cfg.format, cfg.src_lang, cfg.tgt_lang, [file_digest(p) for p in paths])
        return RawSplit(split, key, " + ".join(map(str, paths)), cfg, cache_root)
    if cfg.source == "hub":
        with progress_bars_on_tty():
            ds = _load_hub(cfg, split, cache_root)  # cached by datasets; its fingerprint is the content key
        key = fingerprint(_READER_VERSION, ds._fingerprint)
        return RawSplit(split, key, f"hub dataset {cfg.hub.name} split {_hub_split(cfg, split)}", cfg, cache_root)
    raise DataError(f"unknown data source '{cfg.source}', expected demo | files | hub")


# ---------------------------------------------------------------------------------------------- files


def _resolve(path: Path) -> Path:
    """``path`` if it exists, else ``path.gz``; ``DataError`` naming both when neither does."""
    gz = path.with_name(path.name + ".gz")
    for candidate in (path, gz):
        if candidate.is_dir():
            raise DataError(f"{candidate} is a directory, expected a data file")
        if candidate.is_file():
            return candidate
    raise DataError(f"missing data file: {path} (nor {gz.name})")


def train_prefixes(cfg: DataConfig) -> list[str]:
    """``data.train_prefix`` as a list: one prefix (a str) or several (read in order as one split).

    ``ConfigError`` (``data.train_prefix=...: ...``) for anything but a non-empty str or a non-empty list of them.
    """
    problem = TRAIN_PREFIX_RULE.problem("data", cfg)
    if problem is not None:
        raise ConfigError([problem])
    value = cfg.train_prefix
    return [value] if isinstance(value, str) else [str(v) for v in value]


def split_prefixes(cfg: DataConfig, split: str) -> list[str]:
    """The file prefixes of one split, in reading order (several only for ``train``)."""
    if split == "train":
        return train_prefixes(cfg)
    return [{"valid": cfg.valid_prefix, "test": cfg.test_prefix}[split]]


def split_file_groups(cfg: DataConfig, split: str) -> list[list[Path]]:
    """Per prefix of the split, its files: ``[PREFIX.SRC, PREFIX.TGT]`` for parallel, ``[PREFIX.tsv|jsonl]``."""
    if cfg.dir is None:
        raise DataError("data.dir must be set for source=files")
    if not Path(cfg.dir).is_dir():
        raise DataError(f"data.dir={cfg.dir}: no such directory")
    if cfg.format == "parallel":
        suffixes = [cfg.src_lang, cfg.tgt_lang]
    elif cfg.format in ("tsv", "jsonl"):
        suffixes = [cfg.format]
    else:
        raise DataError(f"unknown data.format '{cfg.format}', expected parallel | tsv | jsonl")
    return [
        [_resolve(Path(cfg.dir) / f"{prefix}.{suffix}") for suffix in suffixes]
        for prefix in split_prefixes(cfg, split)
    ]


def split_files(cfg: DataConfig, split: str) -> list[Path]:
    """Every file of one split, in reading order (the groups of ``split_file_groups`` one after another)."""
    return [path for group in split_file_groups(cfg, split) for path in group]


def _generate(paths: str, fmt: str, src_lang: str, tgt_lang: str, key: str) -> Iterator[dict[str, str]]:
    """Generator for ``Dataset.from_generator``; ``key`` (content hash) is only there to key the cache.
    ``paths`` is one string joined by NUL: datasets would treat a list in ``gen_kwargs`` as shards.
    For parallel text the paths go in pairs (src, tgt), read pair after pair."""
    files = [Path(p) for p in paths.split("\0")]
    if fmt == "parallel":
        for src, tgt in zip(files[::2], files[1::2], strict=True):
            yield from parallel_pairs(src, tgt)
    elif fmt == "tsv":
        for path in files:
            yield from tsv_pairs(path)
    else:
        for path in files:
            yield from jsonl_pairs(path, src_lang, tgt_lang)


def _load_files(cfg: DataConfig, split: str, key: str, cache_root: Path) -> datasets.Dataset:
    groups = [[p.resolve() for p in group] for group in split_file_groups(cfg, split)]
    files = [p for group in groups for p in group]
    if cfg.format == "parallel":
        for src, tgt in groups:  # every pair, before reading a large corpus into Arrow
            check_line_counts(src, tgt)
    if all(p.stat().st_size == 0 for p in files):
        return datasets.Dataset.from_dict({"src": [], "tgt": []}, features=_FEATURES)  # load() rejects it
    kwargs = {
        "paths": "\0".join(map(str, files)),
        "fmt": cfg.format,
        "src_lang": cfg.src_lang,
        "tgt_lang": cfg.tgt_lang,
        "key": key,
    }
    try:
        return datasets.Dataset.from_generator(
            _generate,
            features=_FEATURES,
            gen_kwargs=kwargs,
            cache_dir=str(cache_root / "hf"),
            split=datasets.Split.TRAIN,
        )
    except datasets.exceptions.DatasetGenerationError as e:
        if isinstance(e.__cause__, DataError):
            raise e.__cause__ from None
        raise
    except ValueError as e:  # datasets cannot write a split of zero rows (e.g. a JSONL file of blank lines)
        if "corresponds to no data" not in str(e):
            raise
        return datasets.Dataset.from_dict({"src": [], "tgt": []}, features=_FEATURES)


# ------------------------------------------------------------------------------------------------ hub


def _hub_split(cfg: DataConfig, split: str) -> str:
    return {"train": cfg.hub.train_split, "valid": cfg.hub.valid_split, "test": cfg.hub.test_split}[split]


def _to_pairs(batch: dict[str, list[Any]], src_lang: str, tgt_lang: str) -> dict[str, list[str]]:
    pairs = [pick_languages(row, src_lang, tgt_lang, "hub row") for row in batch["translation"]]
    return {"src": [p["src"] for p in pairs], "tgt": [p["tgt"] for p in pairs]}


def _load_hub(cfg: DataConfig, split: str, cache_root: Path) -> datasets.Dataset:
    """A hub dataset (``load_dataset``) or a local directory: ``save_to_disk`` output or data files."""
    name, hub_split = cfg.hub.name, _hub_split(cfg, split)
    if name is None:
        raise DataError("data.hub.name must be set for source=hub")
    local = Path(name)
    try:
        if (local / "dataset_dict.json").is_file() or (local / "state.json").is_file():
            loaded = datasets.load_from_disk(str(local))
            ds = loaded[hub_split] if isinstance(loaded, datasets.DatasetDict) else loaded
        else:
            ds = datasets.load_dataset(name, cfg.hub.config, split=hub_split, cache_dir=str(cache_root / "hf"))
    except (KeyError, ValueError, FileNotFoundError) as e:
        raise DataError(f"cannot load split '{hub_split}' of hub dataset '{name}': {e}") from None
    if "translation" not in ds.column_names:
        raise DataError(f"hub dataset '{name}' split '{hub_split}' has no 'translation' column: {ds.column_names}")
    # the cache file goes under our cache dir, never beside a user's save_to_disk directory
    fp = fingerprint(ds._fingerprint, cfg.src_lang, cfg.tgt_lang)
    (cache_root / "hf").mkdir(parents=True, exist_ok=True)
    return ds.map(
        _to_pairs,
        batched=True,
        remove_columns=ds.column_names,
        features=_FEATURES,
        fn_kwargs={"src_lang": cfg.src_lang, "tgt_lang": cfg.tgt_lang},
        new_fingerprint=fp,
        cache_file_name=str(cache_root / "hf" / f"pairs-{fp}.arrow"),
    )
