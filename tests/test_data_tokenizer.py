"""SentencePiece tokenizers: exact round trip on Multi30k val, special ids, joint/separate, errors."""

from __future__ import annotations

import gzip
import random
from pathlib import Path

import pytest

from mt.data import BOS_ID, EOS_ID, PAD_ID, UNK_ID, DataError, Tokenizer, Tokenizers, train_tokenizer
from mt.data.tokenizer import BYTE_FALLBACK_MIN_VOCAB


def _lines(path: Path) -> list[str]:
    with gzip.open(path, "rt", encoding="utf-8") as f:
        return f.read().split("\n")[:-1]


@pytest.fixture(scope="module")
def val(multi30k_dir: Path) -> tuple[list[str], list[str]]:
    return _lines(multi30k_dir / "val.en.gz"), _lines(multi30k_dir / "val.de.gz")


@pytest.fixture(scope="module")
def joint(val: tuple[list[str], list[str]]) -> Tokenizer:
    en, de = val
    return train_tokenizer(iter(en + de), 1000)


def test_round_trip_every_val_line(joint: Tokenizer, val: tuple[list[str], list[str]]) -> None:
    en, de = val
    bad = [x for x in en + de if joint.decode(joint.encode(x)) != x]
    assert bad == []
    assert joint.decode(joint.encode("  two  spaces, trailing space ")) == "  two  spaces, trailing space "


def test_special_ids_and_sizes(joint: Tokenizer) -> None:
    assert (PAD_ID, UNK_ID, BOS_ID, EOS_ID) == (0, 1, 2, 3)
    assert [joint.id_to_piece(i) for i in range(4)] == ["<pad>", "<unk>", "<s>", "</s>"]
    ids = joint.encode("A man sleeping in a green room.")
    assert ids and not {PAD_ID, BOS_ID, EOS_ID} & set(ids)
    assert joint.decode([BOS_ID, *ids, EOS_ID, PAD_ID, PAD_ID]) == "A man sleeping in a green room."
    assert joint.decode([*ids, joint.vocab_size + 3]) == "A man sleeping in a green room."  # embedding padding ids
    assert joint.vocab_size == 1000 and joint.padded_vocab_size == 1000
    odd = Tokenizer.from_proto(train_tokenizer(iter(["ab cd ef"] * 20), 13).model_proto)
    assert (odd.vocab_size, odd.padded_vocab_size) == (13, 16)


def test_proto_and_file_round_trip(joint: Tokenizer, tmp_path: Path) -> None:
    again = Tokenizer.from_proto(joint.model_proto)
    joint.save(tmp_path / "x.model")
    loaded = Tokenizer.load(tmp_path / "x.model")
    text = "Zwei Männer stehen am Herd."
    assert again.encode(text) == loaded.encode(text) == joint.encode(text)
    pair = Tokenizers(joint, joint, joint=True)
    pair.save(tmp_path / "tok")
    reloaded = Tokenizers.load(tmp_path / "tok")
    assert reloaded.joint and reloaded.src is reloaded.tgt and reloaded.src.model_proto == joint.model_proto


def test_byte_fallback_round_trips_unseen_characters(val: tuple[list[str], list[str]]) -> None:
    en, de = val
    big = train_tokenizer(iter(en + de), BYTE_FALLBACK_MIN_VOCAB)
    for text in ("日本語 naïve — Ωmega ✓", "emoji 🙂 end"):
        assert big.decode(big.encode(text)) == text
    small = train_tokenizer(iter(en + de), 500)  # too small to spend 256 pieces on bytes: UNK instead
    assert UNK_ID in small.encode("日本")


def test_vocab_too_large_is_a_clear_error() -> None:
    with pytest.raises(DataError, match=r"joint vocabulary of 5000 pieces is larger than the training data.*<= \d+"):
        train_tokenizer(iter(["a tiny corpus", "of two lines"] * 10), 5000)


# what read_lines keeps inside a line: NUL, zero-width (ZWSP, ZWJ, BOM), combining marks, controls, nothing
ODD_LINES = [
    "a\x00b", "\x00", "zero\u200bwidth\u200djoin\ufeff", "e\u0301\u0301 q\u0308", "", " ", "\t\x0b\x1c\x85\u2028"
]


def test_odd_lines_encode_without_crashing(joint: Tokenizer, val: tuple[list[str], list[str]]) -> None:
    assert joint.encode("") == [] and joint.encode_batch(["", ""]) == [[], []]
    for text in ODD_LINES:  # no byte fallback at 1000 pieces: unseen characters are UNK, never a crash
        ids = joint.encode(text)
        assert all(0 <= i < joint.vocab_size for i in ids) and (ids == []) == (text == "")
    assert joint.encode_batch(ODD_LINES, num_threads=2) == [joint.encode(t) for t in ODD_LINES]
    en, de = val
    trained = train_tokenizer(iter(en[:500] + de[:500] + ODD_LINES * 3), BYTE_FALLBACK_MIN_VOCAB)  # in training too
    assert [trained.decode(trained.encode(t)) for t in ODD_LINES] == ODD_LINES  # byte fallback: exact


def prefix_spans(tokenizer: Tokenizer, ids: list[int]) -> tuple[str, list[tuple[int, int]]]:
    """The plain reference of ``decode_with_spans``: each id ends where the decoded prefix up to it ends."""
    text = tokenizer.decode(ids)
    spans, end = [], 0
    for k in range(len(ids)):
        start = end
        end = max(start, min(len(tokenizer.decode(ids[: k + 1])), len(text)))
        spans.append((start, end))
    return text, spans


def test_decode_with_spans_equals_the_prefix_reference(joint: Tokenizer, val: tuple[list[str], list[str]]) -> None:
    """SentencePiece's piece offsets give the spans that decoding every prefix gives: on val lines, with
    special and out-of-range ids among them, and on random ids."""
    en, de = val
    rng = random.Random(0)
    cases = [joint.encode(line) for line in en[:300] + de[:300]]
    cases += [[EOS_ID, *ids[:3], PAD_ID, *ids[3:], joint.padded_vocab_size - 1] for ids in cases[:50]]
    cases += [[rng.randrange(joint.padded_vocab_size) for _ in range(rng.randrange(30))] for _ in range(300)]
    assert [joint.decode_with_spans(ids) for ids in cases] == [prefix_spans(joint, ids) for ids in cases]
