"""Sentences in, sentences out: splitting keeps every separator, long sentences are cut, nothing is dropped."""

from __future__ import annotations

import random

import pytest

from mt.document.model import Unit
from mt.document.plan import Translated, plan_units
from mt.document.segment import fit_sentences, split_sentences


def sentences(text: str, language: str = "en", hard_breaks: bool = True) -> list[str]:
    return [text[a:b] for a, b in split_sentences(text, language, hard_breaks)]


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("", []),
        ("   \n\n ", []),
        ("One sentence.", ["One sentence."]),
        ("A man rides. Two dogs play!  Is it cold?", ["A man rides.", "Two dogs play!", "Is it cold?"]),
        ("Mr. Smith went home. He slept.", ["Mr. Smith went home.", "He slept."]),
        ("no full stop at the end", ["no full stop at the end"]),
        ("  leading and trailing  ", ["leading and trailing"]),
        ("Line one\nline two\r\n\nline four.", ["Line one", "line two", "line four."]),
        ("A paragraph. Another one.\n\nA second paragraph.", ["A paragraph.", "Another one.", "A second paragraph."]),
        ('He said "Stop." Then he left.', ['He said "Stop."', "Then he left."]),
        ("Tab\tinside. Next.", ["Tab\tinside.", "Next."]),
    ],
)
def test_split_table(text, expected):
    assert sentences(text) == expected


def test_other_languages_and_an_unknown_one_fall_back_to_default_rules():
    assert sentences("Ein Mann fährt. Zwei Hunde spielen.", "de") == ["Ein Mann fährt.", "Zwei Hunde spielen."]
    assert sentences("Un homme. Deux chiens.", "fr") == ["Un homme.", "Deux chiens."]
    assert sentences("Muž jede. Dva psi.", "cs") == ["Muž jede.", "Dva psi."]
    assert sentences("First one. Second one.", "xx-unknown") == ["First one.", "Second one."]


def test_without_hard_breaks_a_single_line_break_is_spacing_and_a_blank_line_a_break():
    text = "A woman\nin a red dress sings.\n\nA boy jumps."
    assert sentences(text, hard_breaks=True) == ["A woman", "in a red dress sings.", "A boy jumps."]
    assert sentences(text, hard_breaks=False)[-1] == "A boy jumps."


def identity(plan) -> list[Translated]:
    return [Translated(s) for s in plan.sentences]


@pytest.mark.parametrize("hard_breaks", [True, False])
def test_assembling_identity_translations_gives_back_the_text_exactly(hard_breaks):
    rng = random.Random(0)
    words = ["A", "man", "rides.", "Two", "dogs!", "Mr.", "Smith", "is", "here?", "ok", "\n", "\n\n", "  ", "\t",
             "\r\n", "e.g.", "3.5", "»Hallo«", "—", "Ünïcödé."]
    for _ in range(200):
        text = "".join(rng.choice(words) + rng.choice([" ", "", "  "]) for _ in range(rng.randint(0, 40)))
        plan = plan_units([Unit(text)], "en", hard_breaks)
        assert plan.assemble(identity(plan))[0].text == text


def test_every_separator_is_kept_around_translated_sentences():
    text = "  One.  Two!\n\nThree?\r\n"
    plan = plan_units([Unit(text)], "en", True)
    out = plan.assemble([Translated(f"<{s}>") for s in plan.sentences])[0].text
    assert out == "  <One.>  <Two!>\n\n<Three?>\r\n"


def words(text: str) -> int:
    return len(text.split())


def test_a_long_sentence_is_cut_at_clauses_then_words_into_pieces_that_fit():
    text = "When the sun rose over the hills, the farmers went out; the dogs, barking loudly, ran ahead of them."
    spans = fit_sentences(text, split_sentences(text, "en"), words, 7)
    pieces = [text[a:b] for a, b in spans]
    assert all(words(p) <= 7 for p in pieces)
    assert "".join(pieces).replace(" ", "") == text.replace(" ", "")  # nothing dropped
    assert pieces[0] == "When the sun rose over the hills,"  # the clause mark wins over a word in the middle


def test_text_without_spaces_is_cut_between_characters():
    text = "这是一个很长的句子没有空格" * 3
    spans = fit_sentences(text, [(0, len(text))], len, 7)
    assert all(b - a <= 7 for a, b in spans) and "".join(text[a:b] for a, b in spans) == text


@pytest.mark.parametrize("count", [1, 5, 50])
def test_paragraphs_of_many_sentences_and_sentences_three_times_the_limit_lose_nothing(count):
    rng = random.Random(count)
    vocabulary = "the a man dog runs over hill red big small quickly and with".split()
    sentence_list = []
    for i in range(count):
        n = 30 if i % 7 == 0 else rng.randint(3, 9)  # every 7th sentence is 3x the 10-word limit
        sentence_list.append(" ".join(rng.choice(vocabulary) for _ in range(n)).capitalize() + ".")
    text = " ".join(sentence_list)
    plan = plan_units([Unit(text)], "en", False, words, 10)
    assert all(words(s) <= 10 for s in plan.sentences)
    translated = plan.assemble([Translated(s.upper()) for s in plan.sentences])[0].text
    assert translated == text.upper()
