"""Tokenize every split once, filter the training split, and keep the ids on disk for the next run.

Cache layout (``cfg.cache_dir``)::

    hf/                    Arrow text of each source split (datasets' cache, keyed by content hash)
    demo/<fp>/             the demo corpus as parallel files
    <tok_fp>/tokenizer/    spm.model (joint) or src.model + tgt.model
    <tok_fp>/<split>-<fp>/ binarized split: Arrow src, tgt (text), src_ids, tgt_ids (int32) + stats.json

``tok_fp`` hashes the training data's content and the tokenizer settings; a split's ``fp`` hashes its own
content, ``tok_fp`` and (train only) the filter settings. Every cache entry is written to a temporary
directory and renamed into place, so a crash never leaves a half-written entry behind.
"""

from __future__ import annotations

import json
import logging
import shutil
import tempfile
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any, overload

import datasets
import numpy as np
import pyarrow as pa
import torch

from mt.config import DataConfig
from mt.data.errors import DataError
from mt.data.sources import SPLITS, RawSplit, fingerprint, open_split, progress_bars_on_tty
from mt.data.tokenizer import Tokenizer, Tokenizers, train_tokenizer

logger = logging.getLogger(__name__)

_TOK_VERSION = 1  # bump when tokenizer training changes
_BIN_VERSION = 1  # bump when the binarized layout or filtering changes
_PARALLEL_MIN_ROWS = 100_000  # below this, worker processes cost more than they save
_FEATURES = datasets.Features(
    {
        "src": datasets.Value("string"),
        "tgt": datasets.Value("string"),
        "src_ids": datasets.Sequence(datasets.Value("int32")),
        "tgt_ids": datasets.Sequence(datasets.Value("int32")),
    }
)


class TextColumn(Sequence[str]):
    """A lazy, read-only view of an Arrow string column (no Python strings until indexed)."""

    def __init__(self, column: pa.ChunkedArray) -> None:
        self._column = column

    def __len__(self) -> int:
        return len(self._column)

    @overload
    def __getitem__(self, i: int) -> str: ...
    @overload
    def __getitem__(self, i: slice) -> list[str]: ...
    def __getitem__(self, i: int | slice) -> str | list[str]:
        if isinstance(i, slice):
            return self._column[i].to_pylist()
        if not -len(self) <= i < len(self):
            raise IndexError(i)
        return self._column[i].as_py()


def _flat(column: pa.ChunkedArray) -> tuple[np.ndarray, np.ndarray]:
    """``(values (total,) int32, offsets (N+1,) int64)`` of an Arrow list column (no copy if one chunk)."""
    lists = column.combine_chunks() if column.num_chunks != 1 else column.chunk(0)
    offsets = lists.offsets.to_numpy().astype(np.int64)
    return lists.flatten().to_numpy(), offsets - offsets[0]


class TokenizedSplit:
    """One binarized split: ids as a flat int32 array + offsets (memory-mapped Arrow), lengths, raw text."""

    def __init__(self, name: str, dataset: datasets.Dataset) -> None:
        self.name = name
        table = dataset.flatten_indices().data.table if dataset._indices is not None else dataset.data.table
        self._src_values, self._src_offsets = _flat(table.column("src_ids"))
        self._tgt_values, self._tgt_offsets = _flat(table.column("tgt_ids"))
        self.src_lens = torch.from_numpy(np.diff(self._src_offsets))  # (N,) pieces, no EOS
        self.tgt_lens = torch.from_numpy(np.diff(self._tgt_offsets))  # (N,) pieces, no BOS/EOS
        self.src_text: Sequence[str] = TextColumn(table.column("src"))
        self.tgt_text: Sequence[str] = TextColumn(table.column("tgt"))

    def __len__(self) -> int:
        return len(self.src_lens)

    def src_array(self, i: int) -> np.ndarray:
        """Source piece ids of example ``i`` as an int32 view (no copy)."""
        return self._src_values[self._src_offsets[i] : self._src_offsets[i + 1]]

    def tgt_array(self, i: int) -> np.ndarray:
        """Target piece ids of example ``i`` as an int32 view (no copy)."""
        return self._tgt_values[self._tgt_offsets[i] : self._tgt_offsets[i + 1]]

    def src_ids(self, i: int) -> list[int]:
        return self.src_array(i).tolist()

    def tgt_ids(self, i: int) -> list[int]:
        return self.tgt_array(i).tolist()

    def __repr__(self) -> str:
        return f"TokenizedSplit({self.name!r}, pairs={len(self)})"


@dataclass
class PreparedData:
    """Tokenizers and binarized splits, and the cache directory (``<cache_dir>/<tok_fp>``) they live in."""

    tokenizers: Tokenizers
    splits: dict[str, TokenizedSplit]
    cache_dir: Path


@contextmanager
def _atomic_dir(final: Path) -> Iterator[Path]:
    """Yield a temporary sibling of ``final``, renamed to ``final`` on success (a racing winner is kept)."""
    final.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(dir=final.parent, prefix=f".{final.name}."))
    try:
        yield tmp
        if final.exists():
            shutil.rmtree(tmp)
        else:
            tmp.rename(final)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise


# ---------------------------------------------------------------------------------------------- tokenizer


def _column(ds: datasets.Dataset, name: str) -> Iterator[str]:
    for batch in ds.select_columns([name]).iter(batch_size=10_000):
        yield from batch[name]


def train_tokenizers(cfg: DataConfig, train: datasets.Dataset) -> Tokenizers:
    kw: dict[str, Any] = {
        "character_coverage": cfg.character_coverage,
        "sample_size": cfg.tokenizer_sample_size,
    }
    if cfg.joint_vocab:
        sentences = (s for col in ("src", "tgt") for s in _column(train, col))
        tok = train_tokenizer(sentences, cfg.vocab_size, name="joint", **kw)
        return Tokenizers(tok, tok, joint=True)
    src = train_tokenizer(_column(train, "src"), cfg.vocab_size, name=f"source ({cfg.src_lang})", **kw)
    tgt = train_tokenizer(_column(train, "tgt"), cfg.vocab_size, name=f"target ({cfg.tgt_lang})", **kw)
    return Tokenizers(src, tgt, joint=False)


# ------------------------------------------------------------------------------------------- binarizing

_PROCESSORS: dict[int, Tokenizer] = {}  # per process: workers rebuild a model once, not per batch


def _tokenizer(proto: bytes) -> Tokenizer:
    key = hash(proto)
    if key not in _PROCESSORS:
        _PROCESSORS[key] = Tokenizer.from_proto(proto)
    return _PROCESSORS[key]


def _encode(
    batch: dict[str, list[str]], src_proto: bytes, tgt_proto: bytes, threads: int
) -> dict[str, list[list[int]]]:
    return {
        "src_ids": _tokenizer(src_proto).encode_batch(batch["src"], num_threads=threads),
        "tgt_ids": _tokenizer(tgt_proto).encode_batch(batch["tgt"], num_threads=threads),
    }


def _filter(src_lens: np.ndarray, tgt_lens: np.ndarray, cfg: DataConfig) -> tuple[np.ndarray, dict[str, int]]:
    """Keep mask (N,) and drop counts per reason; each pair counts once, under the first reason that hits."""
    shorter, longer = np.minimum(src_lens, tgt_lens), np.maximum(src_lens, tgt_lens)
    empty = shorter == 0
    too_long = ~empty & (longer > cfg.max_len)
    ratio = ~empty & ~too_long & (longer > cfg.max_len_ratio * np.maximum(shorter, 1))
    dropped = {"empty": int(empty.sum()), "too_long": int(too_long.sum()), "ratio": int(ratio.sum())}
    return ~(empty | too_long | ratio), dropped


def binarize_split(name: str, raw: datasets.Dataset, tokenizers: Tokenizers, cfg: DataConfig, out: Path) -> None:
    """Encode ``raw``, filter it if it is the training split, and save it (with stats.json) to ``out``."""
    # big data: num_workers processes; small data: one process, SentencePiece's C++ threads
    num_proc = cfg.num_workers if len(raw) >= _PARALLEL_MIN_ROWS and cfg.num_workers > 1 else None
    threads = 1 if num_proc else max(1, cfg.num_workers)
    logger.info("binarizing %s (%d pairs, %s process(es))", name, len(raw), num_proc or 1)
    with (
        progress_bars_on_tty(),
        _atomic_dir(out) as tmp,
        tempfile.TemporaryDirectory(dir=out.parent) as scratch,  # out.parent exists by now
    ):
        encoded = raw.map(
            _encode,
            batched=True,
            batch_size=2000,
            num_proc=num_proc,
            features=_FEATURES,
            fn_kwargs={
                "src_proto": tokenizers.src.model_proto,
                "tgt_proto": tokenizers.tgt.model_proto,
                "threads": threads,
            },
            new_fingerprint=out.name,
            cache_file_name=str(Path(scratch) / "encoded.arrow"),
            desc=f"binarizing {name}",
        )
        dropped = {"empty": 0, "too_long": 0, "ratio": 0}
        if name == "train":
            split = TokenizedSplit(name, encoded)
            keep, dropped = _filter(split.src_lens.numpy(), split.tgt_lens.numpy(), cfg)
            if not keep.all():
                encoded = encoded.select(np.flatnonzero(keep))
            if len(encoded) == 0:
                raise DataError(f"every training pair was filtered out ({dropped}); check max_len / max_len_ratio")
        encoded.save_to_disk(str(tmp))
        (tmp / "stats.json").write_text(json.dumps({"dropped": dropped, "raw_pairs": len(raw)}))


# ----------------------------------------------------------------------------------------------- driver


def _done(path: Path) -> bool:
    return (path / "stats.json").is_file()


def prepare_data(cfg: DataConfig, splits: Sequence[str] = SPLITS) -> PreparedData:
    """Read the source, train or reuse the tokenizer, binarize or reuse each split, print a summary.

    Every split that has to be read is read (and validated) before the tokenizer is trained.
    """
    cache_root = Path(cfg.cache_dir)
    raws: dict[str, RawSplit] = {s: open_split(cfg, s, cache_root) for s in dict.fromkeys(("train", *splits))}
    tok_fp = fingerprint(
        _TOK_VERSION,
        raws["train"].key,
        cfg.vocab_size,
        cfg.joint_vocab,
        cfg.character_coverage,
        cfg.tokenizer_sample_size,
    )
    root = cache_root / tok_fp
    filters = {"train": (cfg.max_len, cfg.max_len_ratio)}
    out_dirs = {s: root / f"{s}-{fingerprint(_BIN_VERSION, raws[s].key, tok_fp, filters.get(s))}" for s in splits}

    have_tok = Tokenizers.exists(root / "tokenizer")
    todo = [s for s in splits if not _done(out_dirs[s])]
    to_read = dict.fromkeys((*todo, *(() if have_tok else ("train",))))
    loaded = {s: raws[s].load() for s in to_read}  # all validation happens here, before any training

    if have_tok:
        tokenizers = Tokenizers.load(root / "tokenizer")
        logger.info("reusing tokenizer %s", root / "tokenizer")
    else:
        tokenizers = train_tokenizers(cfg, loaded["train"])
        with _atomic_dir(root / "tokenizer") as tmp:
            tokenizers.save(tmp)
    for s in todo:
        binarize_split(s, loaded[s], tokenizers, cfg, out_dirs[s])

    result = {s: TokenizedSplit(s, datasets.load_from_disk(str(out_dirs[s]))) for s in splits}
    stats = {s: json.loads((out_dirs[s] / "stats.json").read_text()) for s in splits}
    print(format_summary(tokenizers, result, stats, reused=[s for s in splits if s not in todo], root=root))
    return PreparedData(tokenizers, result, root)


def format_summary(
    tokenizers: Tokenizers,
    splits: dict[str, TokenizedSplit],
    stats: dict[str, dict[str, Any]],
    reused: Sequence[str],
    root: Path,
) -> str:
    """A table: per split pairs, tokens, mean/max lengths per side, dropped pairs per reason."""
    kind = "joint" if tokenizers.joint else "separate"
    vocab = (
        f"{tokenizers.src.vocab_size}"
        if tokenizers.joint
        else f"{tokenizers.src.vocab_size}/{tokenizers.tgt.vocab_size}"
    )
    lines = [
        f"data: {kind} BPE vocab {vocab} (cache {root})",
        f"  {'split':<6} {'pairs':>9} {'src tok':>11} {'tgt tok':>11} {'src mean/max':>13} "
        f"{'tgt mean/max':>13}  dropped",
    ]
    for name, split in splits.items():
        src, tgt = split.src_lens.double(), split.tgt_lens.double()
        n = max(len(split), 1)
        dropped = stats[name]["dropped"]
        drop = (
            f"{sum(dropped.values())} ({', '.join(f'{k} {v}' for k, v in dropped.items())})" if name == "train" else "-"
        )
        cached = " (cached)" if name in reused else ""
        lines.append(
            f"  {name:<6} {len(split):>9} {int(src.sum()):>11} {int(tgt.sum()):>11} "
            f"{float(src.sum()) / n:>8.1f}/{int(src.max()) if len(split) else 0:<4} "
            f"{float(tgt.sum()) / n:>8.1f}/{int(tgt.max()) if len(split) else 0:<4}  {drop}{cached}"
        )
    return "\n".join(lines)
