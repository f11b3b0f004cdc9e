"""SentencePiece BPE tokenizers with fixed special ids (``PAD=0 UNK=1 BOS=2 EOS=3``).

Training uses the ``identity`` normalization and keeps whitespace as is, so ``decode(encode(x)) == x``
for any text made of characters seen in training. With a vocabulary of at least ``BYTE_FALLBACK_MIN_VOCAB``
pieces, unseen characters fall back to UTF-8 byte pieces and round-trip too; smaller vocabularies (the
demo's 256) cannot afford the 256 byte pieces and map unseen characters to ``UNK``.
"""

from __future__ import annotations

import io
import json
import re
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path

import sentencepiece as spm

from mt.data.errors import DataError

PAD_ID, UNK_ID, BOS_ID, EOS_ID = 0, 1, 2, 3
SPECIAL_IDS = frozenset((PAD_ID, BOS_ID, EOS_ID))  # skipped by decode (UNK decodes to " ⁇ ")
BYTE_FALLBACK_MIN_VOCAB = 1024  # byte pieces take at most a quarter of the vocabulary
SPM_RANDOM_SEED = 2**32 - 1  # SentencePiece's "seed from std::random_device": sample_batch seeds are below it


def round_up(n: int, multiple: int) -> int:
    """Smallest multiple of ``multiple`` that is >= ``n``."""
    return -(-n // multiple) * multiple


class Tokenizer:
    """One SentencePiece model: pieces in, ids out (no BOS/EOS added)."""

    def __init__(self, model_proto: bytes) -> None:
        self._proto = bytes(model_proto)
        self._sp = spm.SentencePieceProcessor(model_proto=self._proto)

    @classmethod
    def from_proto(cls, model_proto: bytes) -> Tokenizer:
        """From the serialized ``.model`` bytes (as stored in checkpoints)."""
        return cls(model_proto)

    @classmethod
    def load(cls, path: str | Path) -> Tokenizer:
        """From a ``.model`` file."""
        return cls(Path(path).read_bytes())

    def save(self, path: str | Path) -> None:
        """Write the ``.model`` file."""
        Path(path).write_bytes(self._proto)

    @property
    def model_proto(self) -> bytes:
        return self._proto

    @property
    def vocab_size(self) -> int:
        """Pieces as trained, specials included."""
        return self._sp.get_piece_size()

    @property
    def padded_vocab_size(self) -> int:
        """``vocab_size`` rounded up to a multiple of 8: the model's embedding size."""
        return round_up(self.vocab_size, 8)

    @property
    def language_codes(self) -> dict[str, int]:
        """Language -> the id of its code token: none in mt's own vocabularies (an imported M2M-100 / NLLB
        vocabulary has them: ``VocabTokenizer``)."""
        return {}

    def encode(self, text: str) -> list[int]:
        """Piece ids of ``text``, without BOS/EOS."""
        return self._sp.encode(text)

    def encode_batch(self, texts: Sequence[str], num_threads: int = 1) -> list[list[int]]:
        """Piece ids of many texts (SentencePiece's C++ loop, ``num_threads`` threads)."""
        return self._sp.encode(list(texts), num_threads=num_threads)

    def sample_batch(self, texts: Sequence[str], alpha: float, seed: int) -> list[list[int]]:
        """BPE-dropout piece ids of ``texts`` (each merge skipped with probability ``alpha``; Provilkov et al.
        2020), reproducible: SentencePiece's generator is reseeded with ``seed`` and one thread encodes in order."""
        if not 0 <= seed < SPM_RANDOM_SEED:
            raise ValueError(f"seed must be in [0, {SPM_RANDOM_SEED}), got {seed}")
        spm.set_random_generator_seed(seed)
        return self._sp.encode(list(texts), enable_sampling=True, alpha=alpha, nbest_size=-1, num_threads=1)

    def decode(self, ids: Iterable[int]) -> str:
        """Text of ``ids``; PAD/BOS/EOS and ids past ``vocab_size`` (embedding padding) are skipped."""
        n = self.vocab_size
        return self._sp.decode([i for i in ids if i not in SPECIAL_IDS and 0 <= i < n])

    def encode_with_spans(self, text: str) -> tuple[list[int], list[tuple[int, int]]]:
        """Piece ids of ``text`` and each piece's ``[start, end)`` character span in ``text`` (a piece that
        only marks a space, ``▁``, covers that space)."""
        proto = self._sp.encode(text, return_type="proto")
        char_at = _char_offsets(text)
        spans = [(char_at[p.begin], char_at[p.end]) for p in proto.pieces]
        return [p.id for p in proto.pieces], spans

    def decode_with_spans(self, ids: Sequence[int]) -> tuple[str, list[tuple[int, int]]]:
        """``decode(ids)`` and each id's ``[start, end)`` character span in it (empty for skipped ids), as
        SentencePiece's detokenizer places each piece (a piece's leading space is in its span)."""
        n = self.vocab_size
        proto = self._decode_proto([i for i in ids if i not in SPECIAL_IDS and 0 <= i < n])
        char_at = _char_offsets(proto.text)
        placed = iter(proto.pieces)
        spans, end = [], 0
        for i in ids:
            if i in SPECIAL_IDS or not 0 <= i < n:
                spans.append((end, end))
                continue
            piece = next(placed)
            start, end = char_at[piece.begin], char_at[piece.end]
            spans.append((start, end))
        return proto.text, spans

    def _decode_proto(self, kept: list[int]):
        """SentencePiece's decoding (text and each piece's place) of ids with the specials left out."""
        return self._sp.decode(kept, return_type="proto")

    def id_to_piece(self, i: int) -> str:
        return self._sp.id_to_piece(i)

    def piece_id(self, piece: str) -> int | None:
        """The id of the whole piece ``piece`` (e.g. a tag ``>>fr<<``), or None when the model lacks it."""
        i = self._sp.piece_to_id(piece)
        return i if self._sp.id_to_piece(i) == piece else None

    def __repr__(self) -> str:
        return f"Tokenizer(vocab_size={self.vocab_size})"


def _char_offsets(text: str) -> list[int]:
    """For each UTF-8 byte offset of ``text`` (and its end), the offset of the character it falls in."""
    out = []
    for i, char in enumerate(text):
        out.extend([i] * len(char.encode("utf-8", "surrogatepass")))
    out.append(len(text))
    return out


@dataclass(frozen=True)
class Tokenizers:
    """Source and target tokenizers; with ``joint=True`` they are one model (``src is tgt``)."""

    src: Tokenizer
    tgt: Tokenizer
    joint: bool

    def save(self, directory: str | Path) -> None:
        """``spm.model`` when joint, else ``src.model`` and ``tgt.model``; an imported model's vocabulary beside
        its model as ``src.vocab.json`` / ``tgt.vocab.json`` (``mt.data.vocab_tokenizer``)."""
        directory = Path(directory)
        directory.mkdir(parents=True, exist_ok=True)
        sides = [("spm", self.src)] if self.joint else [("src", self.src), ("tgt", self.tgt)]
        for name, tokenizer in sides:
            tokenizer.save(directory / f"{name}.model")
            vocab = getattr(tokenizer, "vocab", None)
            if vocab is not None:
                table = {"pieces": vocab, "rows": tokenizer.padded_vocab_size}
                (directory / f"{name}.vocab.json").write_text(json.dumps(table, ensure_ascii=False), encoding="utf-8")

    @classmethod
    def load(cls, directory: str | Path) -> Tokenizers:
        """The inverse of ``save``."""
        directory = Path(directory)
        if (directory / "spm.model").is_file():
            tok = _load_side(directory, "spm")
            return cls(tok, tok, joint=True)
        return cls(_load_side(directory, "src"), _load_side(directory, "tgt"), joint=False)

    @staticmethod
    def exists(directory: str | Path) -> bool:
        return bool(Tokenizers.files(directory))

    @staticmethod
    def files(directory: str | Path) -> list[Path]:
        """The files ``save`` wrote into ``directory``: ``[spm.model]``, ``[src.model, tgt.model]`` (with any
        ``*.vocab.json``) or []."""
        directory = Path(directory)
        for names in (["spm"], ["src", "tgt"]):
            paths = [directory / f"{name}.model" for name in names]
            if all(path.is_file() for path in paths):
                vocabs = [directory / f"{name}.vocab.json" for name in names]
                return paths + [path for path in vocabs if path.is_file()]
        return []

    @property
    def shared_vocabulary(self) -> bool:
        """Whether both sides number the same pieces the same way (one embedding can serve both)."""
        if self.joint:
            return True
        src, tgt = getattr(self.src, "vocab", None), getattr(self.tgt, "vocab", None)
        return src is not None and src == tgt and self.src.padded_vocab_size == self.tgt.padded_vocab_size


def _load_side(directory: Path, name: str) -> Tokenizer:
    """``NAME.model``, read through ``NAME.vocab.json`` when there is one."""
    proto = (directory / f"{name}.model").read_bytes()
    table = directory / f"{name}.vocab.json"
    if not table.is_file():
        return Tokenizer(proto)
    from mt.data.vocab_tokenizer import VocabTokenizer

    vocab = json.loads(table.read_text(encoding="utf-8"))
    return VocabTokenizer(proto, vocab["pieces"], vocab["rows"])


def train_tokenizer(
    sentences: Iterator[str],
    vocab_size: int,
    *,
    character_coverage: float = 1.0,
    sample_size: int = 2_000_000,
    seed: int = 1,
    name: str = "joint",
    user_symbols: Sequence[str] = (),
) -> Tokenizer:
    """Train a BPE model on ``sentences`` in memory; ``DataError`` if the data cannot fill ``vocab_size``.

    ``user_symbols`` (e.g. target tags ``>>fr<<``) become pieces of their own that encoding never splits.
    """
    spm.set_random_generator_seed(seed)  # the sentence sample is drawn with SentencePiece's own RNG
    model = io.BytesIO()
    try:
        spm.SentencePieceTrainer.train(
            sentence_iterator=sentences,
            model_writer=model,
            model_type="bpe",
            vocab_size=vocab_size,
            pad_id=PAD_ID,
            unk_id=UNK_ID,
            bos_id=BOS_ID,
            eos_id=EOS_ID,
            pad_piece="<pad>",
            unk_piece="<unk>",
            bos_piece="<s>",
            eos_piece="</s>",
            normalization_rule_name="identity",
            remove_extra_whitespaces=False,  # keep decode(encode(x)) == x for any spacing
            character_coverage=character_coverage,
            byte_fallback=vocab_size >= BYTE_FALLBACK_MIN_VOCAB,
            input_sentence_size=sample_size,
            shuffle_input_sentence=True,
            num_threads=2,
            minloglevel=2,  # errors only: no training log spam
            user_defined_symbols=list(user_symbols),
        )
    except RuntimeError as e:
        found = re.search(r"Vocabulary size too high.*", str(e))
        if found is None:
            raise
        raise DataError(
            f"{name} vocabulary of {vocab_size} pieces is larger than the training data supports "
            f"(SentencePiece: {found.group(0).strip()}); lower data.vocab_size"
        ) from None
    return Tokenizer(model.getvalue())
