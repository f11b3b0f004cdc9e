"""What every export target shares: the checkpoint's network, vocabularies and decoding defaults.

Only ``mt.checkpoint`` (``load_for_inference``) and ``mt.model`` are read; nothing from ``mt.train``.
Both targets run mt's very network: weights are copied as they are, the positional table included
(mt's own sinusoid table, or its learned positions), so nothing is recomputed by another formula.
"""

from __future__ import annotations

import math
import shutil
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import torch

from mt.checkpoint import load_for_inference
from mt.config import Config, DecodeConfig
from mt.data import Tokenizer, Tokenizers
from mt.data.tokenizer import BOS_ID, EOS_ID, PAD_ID, UNK_ID
from mt.errors import UserError
from mt.model import LearnedPositions, Seq2SeqTransformer, SinusoidalPositions, TransformerEmbedding

# what the special ids' pieces must be: both targets name special tokens by piece
SPECIAL_PIECES = {PAD_ID: "<pad>", UNK_ID: "<unk>", BOS_ID: "<s>", EOS_ID: "</s>"}


class ExportError(UserError):
    """A checkpoint, option or output directory that an export cannot handle; the message says why."""


@dataclass(frozen=True)
class ExportSource:
    """A checkpoint loaded for export: the model (eval mode, CPU), its tokenizers and its config."""

    path: Path
    model: Seq2SeqTransformer
    tokenizers: Tokenizers
    cfg: Config


@dataclass(frozen=True)
class SearchDefaults:
    """The checkpoint's ``decode`` settings as the one-number knobs CTranslate2 and HF generate have."""

    beam_size: int  # 1 = greedy
    length_penalty: float  # alpha of |Y|^alpha (|Y| counts the EOS in both libraries, as in mt)
    max_output_pieces: int  # pieces before the forced EOS, for the longest source the model accepts
    exact_length_limit: bool  # False when mt's limit a*|src|+b depends on the source (a != 0)
    notes: tuple[str, ...]  # what differs from mt's own search with these settings


def load_source(path: str | Path) -> ExportSource:
    """The checkpoint at ``path`` (``CheckpointError`` if missing or broken), checked for export."""
    path = Path(path)
    model, tokenizers, cfg = load_for_inference(path, "cpu")
    for side, tokenizer in (("source", tokenizers.src), ("target", tokenizers.tgt)):
        found = {i: tokenizer.id_to_piece(i) for i in SPECIAL_PIECES}
        wrong = {i: piece for i, piece in found.items() if piece != SPECIAL_PIECES[i]}
        if wrong:
            raise ExportError(
                f"{path}: the {side} SentencePiece model has special pieces {wrong}, expected {SPECIAL_PIECES}; "
                "export needs the tokenizer mt trains (mt.data.train_tokenizer)"
            )
    return ExportSource(path, model, tokenizers, cfg)


def pieces(tokenizer: Tokenizer) -> list[str]:
    """The vocabulary as SentencePiece pieces, id order (``vocab_size`` entries, no embedding padding)."""
    return [tokenizer.id_to_piece(i) for i in range(tokenizer.vocab_size)]


def banned_ids(tokenizer: Tokenizer) -> list[int]:
    """Ids mt never generates: PAD, BOS and the embedding's padding rows (``mt.decode.common.ban_``)."""
    return [PAD_ID, BOS_ID, *range(tokenizer.vocab_size, tokenizer.padded_vocab_size)]


def position_table(embedding: TransformerEmbedding) -> torch.Tensor:
    """The (max_positions, D) table added to the scaled token embeddings: sinusoids or learned vectors."""
    positions = embedding.positions
    if isinstance(positions, SinusoidalPositions):
        return positions.table.detach().clone()  # type: ignore[union-attr]
    if isinstance(positions, LearnedPositions):
        return positions.embedding.weight.detach().clone()
    raise ExportError(f"unknown positional encoding {type(positions).__name__}")


def fused_split(weight: torch.Tensor, parts: int) -> list[torch.Tensor]:
    """A fused projection (parts*D, ...) cut into its ``parts`` blocks (Q|K|V or K|V), each (D, ...)."""
    return [block.detach().clone().contiguous() for block in weight.chunk(parts, dim=0)]


def longest_source(cfg: Config) -> int:
    """Source pieces (EOS excluded) the model accepts, as ``mt.decode.Translator`` truncates them."""
    return cfg.model.max_positions - 1


def search_defaults(cfg: Config) -> SearchDefaults:
    """Map ``cfg.decode`` onto beam size, |Y|^alpha penalty and one length limit; see ``SearchDefaults``."""
    decode: DecodeConfig = cfg.decode
    notes = []
    if decode.strategy == "sample":
        notes.append("the checkpoint decodes by sampling; the exported defaults are greedy search")
    beam = decode.beam_size if decode.strategy == "beam" else 1
    alpha = {"length": decode.alpha, "none": 0.0, "gnmt": decode.alpha}[decode.length_penalty]
    if decode.length_penalty == "gnmt" and beam > 1:
        notes.append(
            f"mt's GNMT penalty ((5+|Y|)/6)^{decode.alpha} has no equivalent: the export uses |Y|^{decode.alpha} "
            "(mt's 'length' penalty), which ranks hypotheses of different lengths differently"
        )
    positions_left = cfg.model.max_positions - 1  # the decoder input [BOS] + pieces must fit the positions
    limit = max(1, math.floor(decode.max_len_a * longest_source(cfg) + decode.max_len_b))
    exact = decode.max_len_a == 0
    if not exact:
        notes.append(
            f"mt's length limit {decode.max_len_a}*|src|+{decode.max_len_b} depends on the source; the export "
            f"has one limit, that of the longest source ({min(limit, positions_left)} pieces)"
        )
    return SearchDefaults(beam, alpha, min(limit, positions_left), exact, tuple(notes))


def prepare_output_dir(out: Path, force: bool) -> None:
    """Refuse an existing ``out`` unless ``force`` (then remove it); create its parent."""
    if out.exists() or out.is_symlink():
        if not force:
            raise ExportError(f"{out} already exists; pass --force to replace it")
        if out.is_dir() and not out.is_symlink():
            shutil.rmtree(out)
        else:
            out.unlink()
    out.parent.mkdir(parents=True, exist_ok=True)


@contextmanager
def removed_on_failure(out: Path) -> Iterator[None]:
    """Remove ``out`` if the block raises, so a failed export never leaves a half-written model."""
    try:
        yield
    except BaseException:
        shutil.rmtree(out, ignore_errors=True)
        raise


def need(module: str, target: str):
    """Import ``module`` or raise an ``ExportError`` that says how to install it."""
    import importlib

    try:
        return importlib.import_module(module)
    except ModuleNotFoundError as e:
        raise ExportError(
            f"--to {target} needs the {module} package, which is not installed: pip install -e '.[export]'"
        ) from e
