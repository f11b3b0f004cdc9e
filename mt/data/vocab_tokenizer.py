"""A SentencePiece model read through a vocabulary of its own: how imported models tokenize.

Marian (OPUS-MT) and fairseq-built models (M2M-100, NLLB) do not use SentencePiece's ids: SentencePiece
cuts text into pieces, and a separate vocabulary (Marian's ``vocab.json``, fairseq's dictionary) gives
each piece its model id; a piece the vocabulary lacks is ``<unk>``. ``VocabTokenizer`` is that pipeline
with mt's fixed special ids: ``vocab[i]`` is the piece of model id ``i``, and ``vocab[:4]`` are mt's
``<pad> <unk> <s> </s>`` (``mt.pretrained`` permutes the imported embedding rows to match).

The vocabulary's entries that SentencePiece never makes (its added tokens) are special when named like one:
a language code, M2M-100's ``__en__`` or NLLB's ``eng_Latn`` (``language_codes``: the source starts with the
source language's code, the target with the target language's, ``mt.decode.translator``), or a control name:
NLLB's ``<mask>``, or fairseq's ``<s>`` kept as ``<s:0>`` (``mt.pretrained.vocab``). ``decode`` leaves them out,
as transformers' ``skip_special_tokens`` does.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence

import numpy as np

from mt.data.tokenizer import BOS_ID, EOS_ID, PAD_ID, SPECIAL_IDS, UNK_ID, Tokenizer

SPECIAL_PIECES = {PAD_ID: "<pad>", UNK_ID: "<unk>", BOS_ID: "<s>", EOS_ID: "</s>"}
LANGUAGE_CODE = re.compile(r"__(?P<m2m>[a-z]{2,3})__|(?P<nllb>[a-z]{3}_[A-Z][a-z]{3})")  # __en__, eng_Latn
CONTROL_NAME = re.compile(r"<mask>|</?[a-z]+:[0-9]+>")  # NLLB's <mask>; fairseq's <s> kept as <s:0> (mt.pretrained)


class VocabTokenizer(Tokenizer):
    """SentencePiece pieces looked up in ``vocab`` (model id -> piece; ``vocab[:4]`` = mt's specials), over an
    embedding of ``rows`` rows (``len(vocab)`` by default; more when the imported model has rows past its pieces).

    ``encode`` also reads a leading target tag (``>>fr<<``, a vocabulary piece) as Marian's tokenizer does:
    the tag's id, then the rest of the line encoded on its own.
    """

    def __init__(self, model_proto: bytes, vocab: Sequence[str], rows: int | None = None) -> None:
        super().__init__(model_proto)
        vocab = list(vocab)
        self._rows = len(vocab) if rows is None else rows
        if self._rows < len(vocab):
            raise ValueError(f"{rows} embedding rows cannot hold a vocabulary of {len(vocab)} pieces")
        found = {i: vocab[i] for i in SPECIAL_PIECES if i < len(vocab)}
        if found != SPECIAL_PIECES:
            raise ValueError(f"a vocabulary must start with {list(SPECIAL_PIECES.values())}, got {vocab[:4]}")
        if len(set(vocab)) != len(vocab):
            raise ValueError("a vocabulary holds each piece once")
        self._vocab = vocab
        self._ids = {piece: i for i, piece in enumerate(vocab)}
        pieces = [self._sp.id_to_piece(j) for j in range(self._sp.get_piece_size())]
        self._from_spm = np.array([self._ids.get(p, UNK_ID) for p in pieces], dtype=np.int64)  # spm id -> model id
        self._from_spm[self._sp.unk_id()] = UNK_ID
        made = {p for j, p in enumerate(pieces) if not (self._sp.is_control(j) or self._sp.is_unknown(j))}
        added = [(i, piece) for i, piece in enumerate(vocab) if i not in SPECIAL_PIECES and piece not in made]
        self._codes = {code.group("m2m") or piece: i for i, piece in added if (code := LANGUAGE_CODE.fullmatch(piece))}
        self._skipped = {i for i, piece in added if CONTROL_NAME.fullmatch(piece)} | set(self._codes.values())
        self._dropped = SPECIAL_IDS | self._skipped  # what decode leaves out

    @property
    def language_codes(self) -> dict[str, int]:
        """Language (``en``, ``eng_Latn``) -> the id of its code token (a copy; {} for a vocabulary with none)."""
        return dict(self._codes)

    @property
    def vocab(self) -> list[str]:
        """Model id -> piece (a copy)."""
        return list(self._vocab)

    @property
    def vocab_size(self) -> int:
        return len(self._vocab)

    @property
    def padded_vocab_size(self) -> int:
        """The embedding's rows, as the imported model has them (ids past ``vocab_size`` are no piece)."""
        return self._rows

    def _model_ids(self, spm_ids: Sequence[int]) -> list[int]:
        return self._from_spm[np.asarray(spm_ids, dtype=np.int64)].tolist() if len(spm_ids) else []

    def _split_tag(self, text: str) -> tuple[list[int], str]:
        """A leading ``>>xx<<`` in the vocabulary as its id, and the rest of ``text``."""
        if text.startswith(">>") and (end := text.find("<<")) != -1 and text[: end + 2] in self._ids:
            return [self._ids[text[: end + 2]]], text[end + 2 :]
        return [], text

    def encode(self, text: str) -> list[int]:
        tag, text = self._split_tag(text)
        return tag + self._model_ids(self._sp.encode(text))

    def encode_batch(self, texts: Sequence[str], num_threads: int = 1) -> list[list[int]]:
        split = [self._split_tag(text) for text in texts]
        encoded = self._sp.encode([text for _, text in split], num_threads=num_threads)
        return [tag + self._model_ids(ids) for (tag, _), ids in zip(split, encoded, strict=True)]

    def sample_batch(self, texts: Sequence[str], alpha: float, seed: int) -> list[list[int]]:
        split = [self._split_tag(text) for text in texts]
        sampled = super().sample_batch([text for _, text in split], alpha, seed)
        return [tag + self._model_ids(ids) for (tag, _), ids in zip(split, sampled, strict=True)]

    def decode(self, ids: Iterable[int]) -> str:
        """``decode_with_spans``' text, without the spans' bookkeeping."""
        n = len(self._vocab)
        text = self._sp.decode_pieces([self._vocab[i] for i in ids if i not in self._dropped and 0 <= i < n])
        return text.replace("\u2581", " ").strip()

    def encode_with_spans(self, text: str) -> tuple[list[int], list[tuple[int, int]]]:
        tag, rest = self._split_tag(text)
        spm_ids, spans = super().encode_with_spans(rest)  # Tokenizer.encode_with_spans: SentencePiece's ids
        offset = len(text) - len(rest)
        shifted = [(start + offset, end + offset) for start, end in spans]
        return tag + self._model_ids(spm_ids), ([(0, offset)] if tag else []) + shifted

    def _decode_proto(self, kept: list[int]):
        return self._sp.decode_pieces([self._vocab[i] for i in kept], return_type="proto")

    def decode_with_spans(self, ids: Sequence[int]) -> tuple[str, list[tuple[int, int]]]:
        """As Marian's tokenizer decodes: a piece the target SentencePiece model lacks (one of the source's, in a
        shared vocabulary) keeps its ``▁``, which becomes a space; the text is stripped. Language codes and control
        names are left out (an empty span)."""
        text, spans = super().decode_with_spans([PAD_ID if i in self._skipped else i for i in ids])
        spaced = text.replace("\u2581", " ")
        start, end = len(spaced) - len(spaced.lstrip()), len(spaced.rstrip())
        return spaced[start:end], [(min(max(a - start, 0), end - start), min(max(b - start, 0), end - start))
                                   for a, b in spans]

    def id_to_piece(self, i: int) -> str:
        return self._vocab[i]

    def piece_id(self, piece: str) -> int | None:
        return self._ids.get(piece)

    def __repr__(self) -> str:
        return f"VocabTokenizer(vocab_size={self.vocab_size})"
