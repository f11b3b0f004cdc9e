"""Tokenize every split once, filter the training split, and keep the ids on disk for the next run.

Cache layout (``cfg.cache_dir``)::

    hf/                    Arrow text of each source split (datasets' cache, keyed by content hash)
    demo/<fp>/             the demo corpus as parallel files
    <tok_fp>/tokenizer/    spm.model (joint) or src.model + tgt.model
    <tok_fp>/<split>-<fp>/ binarized split: Arrow src, tgt (text), src_ids, tgt_ids (int32) + stats.json
                           (several pairs: also ``pair`` (int32), the index into ``data_pairs``)

``tok_fp`` hashes the training data's content and the tokenizer settings (or, with ``data.tokenizer``, the
reused tokenizer's files: that directory's models are copied into the cache); a split's ``fp`` hashes its own
content, ``tok_fp`` and (train only) the filter settings. With several pairs a split's content key covers
every pair's files in order, and ``tok_fp`` the target tags too; one pair keeps the keys it always had.

A multilingual config (several target languages) trains one joint SentencePiece model over every
language's training text (each language's text once, from the first pair that has it) with the target
tags ``>>de<<``, ``>>fr<<``, ... as user-defined pieces, and each source's ids start with its pair's tag.

Every cache entry is written to a temporary directory and renamed into place, so a crash never leaves a
half-written entry behind.
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
from typing import Any

import datasets
import numpy as np

from mt.config import ConfigError, DataConfig
from mt.data.errors import DataError
from mt.data.languages import data_pairs, is_multilingual, lang_tag, tag_pieces
from mt.data.pair_sources import PAIR_COLUMN, PairedSplit, open_pairs_split
from mt.data.sources import SPLITS, RawSplit, file_digest, fingerprint, progress_bars_on_tty
from mt.data.split import TokenizedSplit
from mt.data.summary import format_summary
from mt.data.tokenizer import Tokenizer, Tokenizers, train_tokenizer
from mt.data.vocab_tokenizer import VocabTokenizer

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
_PAIR_FEATURES = datasets.Features({**_FEATURES, PAIR_COLUMN: datasets.Value("int32")})


@dataclass
class PreparedData:
    """Tokenizers and binarized splits, and the cache directory (``<cache_dir>/<tok_fp>``) they live in."""

    tokenizers: Tokenizers
    splits: dict[str, TokenizedSplit]
    cache_dir: Path


@contextmanager
def atomic_dir(final: Path) -> Iterator[Path]:
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


def _each_language_once(cfg: DataConfig, train: datasets.Dataset) -> Iterator[str]:
    """The training text of every language once: a language's sentences come from the first pair that has it
    (Multi30k's English is the same in en-de, en-fr and en-cs and would otherwise count three times)."""
    pairs = data_pairs(cfg)
    owner: dict[str, int] = {}
    for index, pair in enumerate(pairs):
        owner.setdefault(pair.src, index)
        owner.setdefault(pair.tgt, index)
    for col, side in (("src", "src"), ("tgt", "tgt")):
        for batch in train.select_columns([col, PAIR_COLUMN]).iter(batch_size=10_000):
            for text, pair in zip(batch[col], batch[PAIR_COLUMN], strict=True):
                if owner[getattr(pairs[pair], side)] == pair:
                    yield text


def check_multilingual_vocab(cfg: DataConfig) -> None:
    """A multilingual config needs one joint vocabulary: the tags and every language live in it."""
    if is_multilingual(cfg) and not cfg.joint_vocab:
        raise ConfigError([
            f"data.joint_vocab=false: several target languages ({', '.join(p.name for p in data_pairs(cfg))}) "
            "need one joint vocabulary (data.joint_vocab=true)"
        ])


def check_given_tokenizers(cfg: DataConfig, tokenizers: Tokenizers) -> None:
    """A reused tokenizer (``data.tokenizer``) must be joint and hold every target tag for several targets."""
    if is_multilingual(cfg) and not tokenizers.joint:
        raise DataError(
            f"data.tokenizer={cfg.tokenizer}: several target languages need one joint vocabulary (spm.model)"
        )
    missing = [tag for tag in tag_pieces(cfg) if tokenizers.src.piece_id(tag) is None]
    if missing:
        raise DataError(f"data.tokenizer={cfg.tokenizer}: lacks the target tags {missing} of data.pairs")


def train_tokenizers(cfg: DataConfig, train: datasets.Dataset) -> Tokenizers:
    check_multilingual_vocab(cfg)
    kw: dict[str, Any] = {
        "character_coverage": cfg.character_coverage,
        "sample_size": cfg.tokenizer_sample_size,
    }
    if cfg.joint_vocab:
        if PAIR_COLUMN in train.column_names:
            sentences = _each_language_once(cfg, train)
        else:
            sentences = (s for col in ("src", "tgt") for s in _column(train, col))
        tok = train_tokenizer(sentences, cfg.vocab_size, name="joint", user_symbols=tag_pieces(cfg), **kw)
        return Tokenizers(tok, tok, joint=True)
    src = train_tokenizer(_column(train, "src"), cfg.vocab_size, name=f"source ({cfg.src_lang})", **kw)
    tgt = train_tokenizer(_column(train, "tgt"), cfg.vocab_size, name=f"target ({cfg.tgt_lang})", **kw)
    return Tokenizers(src, tgt, joint=False)


# ------------------------------------------------------------------------------------------- binarizing

_PROCESSORS: dict[int, Tokenizer] = {}  # per process: workers rebuild a model once, not per batch
TokenizerState = tuple[bytes, tuple[str, ...] | None, int | None]  # what a worker rebuilds a tokenizer from


def tokenizer_state(tokenizer: Tokenizer) -> TokenizerState:
    """The SentencePiece model, and an imported model's vocabulary and embedding rows (None for mt's own)."""
    vocab = getattr(tokenizer, "vocab", None)
    if vocab is None:
        return tokenizer.model_proto, None, None
    return tokenizer.model_proto, tuple(vocab), tokenizer.padded_vocab_size


def _tokenizer(state: TokenizerState) -> Tokenizer:
    key = hash(state)
    if key not in _PROCESSORS:
        proto, vocab, rows = state
        _PROCESSORS[key] = Tokenizer.from_proto(proto) if vocab is None else VocabTokenizer(proto, vocab, rows)
    return _PROCESSORS[key]


def _encode(
    batch: dict[str, list], src_state: TokenizerState, tgt_state: TokenizerState, threads: int,
    tags: list[int] | None = None,
) -> dict[str, list[list[int]]]:
    """Source and target ids; with ``tags`` (a tag id per pair) each source starts with its pair's tag."""
    src_ids = _tokenizer(src_state).encode_batch(batch["src"], num_threads=threads)
    if tags is not None:
        src_ids = [[tags[pair], *ids] for pair, ids in zip(batch[PAIR_COLUMN], src_ids, strict=True)]
    return {"src_ids": src_ids, "tgt_ids": _tokenizer(tgt_state).encode_batch(batch["tgt"], num_threads=threads)}


def pair_tag_ids(cfg: DataConfig, tokenizers: Tokenizers) -> list[int] | None:
    """The tag id of each pair's target (index = pair), or None when sources carry no tags (one target)."""
    if not is_multilingual(cfg):
        return None
    ids = [tokenizers.src.piece_id(lang_tag(p.tgt)) for p in data_pairs(cfg)]
    if None in ids:
        raise DataError(f"the tokenizer lacks a target tag of {[p.name for p in data_pairs(cfg)]}; delete its cache")
    return ids


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
        atomic_dir(out) as tmp,
        tempfile.TemporaryDirectory(dir=out.parent) as scratch,  # out.parent exists by now
    ):
        encoded = raw.map(
            _encode,
            batched=True,
            batch_size=2000,
            num_proc=num_proc,
            features=_PAIR_FEATURES if PAIR_COLUMN in raw.column_names else _FEATURES,
            fn_kwargs={
                "src_state": tokenizer_state(tokenizers.src),
                "tgt_state": tokenizer_state(tokenizers.tgt),
                "threads": threads,
                "tags": pair_tag_ids(cfg, tokenizers),
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


@dataclass(frozen=True)
class CachePlan:
    """Where ``prepare_data`` keeps (or finds) the tokenizer and each binarized split of a config."""

    root: Path  # <cache_dir>/<tok_fp>
    split_dirs: dict[str, Path]  # <root>/<split>-<fp>

    @property
    def tokenizer_dir(self) -> Path:
        return self.root / "tokenizer"


def given_tokenizer_files(cfg: DataConfig) -> list[Path]:
    """The model files of ``data.tokenizer`` ([] when unset); ``DataError`` naming the setting when it holds none."""
    if not cfg.tokenizer:
        return []
    files = Tokenizers.files(cfg.tokenizer)
    if not files:
        raise DataError(f"data.tokenizer={cfg.tokenizer}: no tokenizer there (spm.model, or src.model and tgt.model)")
    return files


def plan_cache(cfg: DataConfig, raws: dict[str, RawSplit | PairedSplit]) -> CachePlan:
    """The cache directories of ``raws`` (which must hold ``train``: the tokenizer's key is its content, or
    the content of the ``data.tokenizer`` it reuses)."""
    tags = tag_pieces(cfg)
    given = given_tokenizer_files(cfg)
    if given:
        files = [(path.name, file_digest(path)) for path in given]
        tok_fp = fingerprint(_TOK_VERSION, "given", files, *([tags] if tags else []))  # tags: checked per key
    else:
        tok_fp = fingerprint(
            _TOK_VERSION,
            raws["train"].key,
            cfg.vocab_size,
            cfg.joint_vocab,
            cfg.character_coverage,
            cfg.tokenizer_sample_size,
            *([tags] if tags else []),  # one target: no tags, the key it always had
        )
    root = Path(cfg.cache_dir) / tok_fp
    filters = {"train": (cfg.max_len, cfg.max_len_ratio)}
    dirs = {s: root / f"{s}-{fingerprint(_BIN_VERSION, raw.key, tok_fp, filters.get(s))}" for s, raw in raws.items()}
    return CachePlan(root, dirs)


def open_splits(cfg: DataConfig, splits: Sequence[str] = SPLITS) -> dict[str, RawSplit | PairedSplit]:
    """``splits`` of ``cfg``'s source (every pair), and ``train`` (the tokenizer's data) first, located and keyed."""
    check_multilingual_vocab(cfg)
    cache_root = Path(cfg.cache_dir)
    return {s: open_pairs_split(cfg, s, cache_root) for s in dict.fromkeys(("train", *splits))}


def save_tokenizers(tokenizers: Tokenizers, plan: CachePlan) -> None:
    with atomic_dir(plan.tokenizer_dir) as tmp:
        tokenizers.save(tmp)


def load_split(name: str, plan: CachePlan) -> TokenizedSplit:
    """A binarized split from its cache directory (memory-mapped)."""
    return TokenizedSplit(name, datasets.load_from_disk(str(plan.split_dirs[name])))


def prepare_data(cfg: DataConfig, splits: Sequence[str] = SPLITS) -> PreparedData:
    """Read the source, train or reuse the tokenizer, binarize or reuse each split, print a summary.

    Every split that has to be read is read (and validated) before the tokenizer is trained.
    """
    raws = open_splits(cfg, splits)
    plan = plan_cache(cfg, raws)
    have_tok = Tokenizers.exists(plan.tokenizer_dir)
    todo = [s for s in splits if not _done(plan.split_dirs[s])]
    to_read = dict.fromkeys((*todo, *(() if have_tok or cfg.tokenizer else ("train",))))
    loaded = {s: raws[s].load() for s in to_read}  # all validation happens here, before any training

    if have_tok:
        tokenizers = Tokenizers.load(plan.tokenizer_dir)
        logger.info("reusing tokenizer %s", plan.tokenizer_dir)
    elif cfg.tokenizer:
        tokenizers = Tokenizers.load(cfg.tokenizer)
        check_given_tokenizers(cfg, tokenizers)
        save_tokenizers(tokenizers, plan)
    else:
        tokenizers = train_tokenizers(cfg, loaded["train"])
        save_tokenizers(tokenizers, plan)
    for s in todo:
        binarize_split(s, loaded[s], tokenizers, cfg, plan.split_dirs[s])

    result = {s: load_split(s, plan) for s in splits}
    stats = {s: json.loads((plan.split_dirs[s] / "stats.json").read_text()) for s in splits}
    print(format_summary(tokenizers, result, stats, reused=[s for s in splits if s not in todo], root=plan.root,
                         language_pairs=[p.name for p in data_pairs(cfg)]))
    return PreparedData(tokenizers, result, plan.root)
