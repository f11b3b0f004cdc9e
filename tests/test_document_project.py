"""Inline elements carried onto a translation by a word alignment: placement, nesting, fallbacks.

Each case scripts the translation and its word links (source word, target word) and checks where each
element lands, through ``Plan.assemble`` as every format uses it.
"""

from __future__ import annotations

import re

from mt.decode.align import WORD as ALIGNER_WORD
from mt.document.model import Element, check_inlines, flatten, nest
from mt.document.plan import Translated, plan_units
from mt.document.project import WORD


def translate(tree, translations: list[tuple[str, list[tuple[int, int]] | None]]) -> list:
    """``tree`` (source text with elements) translated by the scripted ``translations``, as a tree again."""
    unit = flatten(tree)
    plan = plan_units([unit], "en", False)
    assert len(plan.sentences) == len(translations), plan.sentences
    out = plan.assemble([Translated(text, links) for text, links in translations])[0]
    check_inlines(out.text, out.inlines)
    return nest(out.text, out.inlines)


def render(tree) -> str:
    """A tree as bracketed text: ``Element(1, ["x"])`` -> ``<1>x</1>``."""
    return "".join(n if isinstance(n, str) else f"<{n.key}>{render(n.children)}</{n.key}>" for n in tree)


def test_the_aligner_and_the_projection_count_the_same_words():
    assert ALIGNER_WORD.pattern == WORD.pattern == re.compile(r"\S+").pattern


def test_an_element_lands_on_the_aligned_words_even_when_they_move():
    tree = ["A ", Element(0, ["red"]), " car."]
    out = translate(tree, [("Une voiture rouge.", [(0, 0), (2, 1), (1, 2)])])
    assert render(out) == "Une voiture <0>rouge</0>."  # the full stop stays outside


def test_nested_elements_keep_their_nesting():
    tree = ["Click ", Element(0, [Element(1, [Element(2, ["here"])])]), " now."]
    out = translate(tree, [("Jetzt hier klicken.", [(2, 0), (1, 1), (0, 2)])])
    assert render(out) == "Jetzt <0><1><2>hier</2></1></0> klicken."


def test_siblings_reordered_by_the_translation_never_overlap():
    tree = [Element(0, ["red"]), " ", Element(1, ["car"]), "."]
    out = translate(tree, [("voiture rouge.", [(1, 0), (0, 1)])])
    assert render(out) == "<1>voiture</1> <0>rouge</0>."


def test_an_element_over_several_words_spans_the_first_to_the_last_aligned_word():
    tree = ["The ", Element(0, ["big red"]), " dog barks."]
    out = translate(tree, [("Der große rote Hund bellt.", [(0, 0), (1, 1), (2, 2), (3, 3), (4, 4)])])
    assert render(out) == "Der <0>große rote</0> Hund bellt."


def test_a_zero_width_element_stays_after_the_word_it_followed():
    tree = ["One", Element(0, []), " two three."]
    out = translate(tree, [("Eins zwei drei.", [(0, 0), (1, 1), (2, 2)])])
    assert render(out) == "Eins<0></0> zwei drei."


def test_an_unaligned_element_falls_back_to_the_same_relative_place():
    tree = ["aaa bbb ", Element(0, ["ccc"]), " ddd."]
    out = translate(tree, [("AAA BBB CCC DDD.", [])])
    assert render(out) == "AAA BBB <0>CCC</0> DDD."


def test_elements_over_whole_sentences_need_no_alignment_and_keep_separators():
    tree = [Element(0, ["First one."]), " ", Element(1, ["Second ", Element(2, ["one"]), "."])]
    unit = flatten(tree)
    plan = plan_units([unit], "en", False)
    assert plan.needs_alignment == [False, True]
    out = translate(tree, [("Erster.", None), ("Zweiter eins.", [(0, 0), (1, 1)])])
    assert render(out) == "<0>Erster.</0> <1>Zweiter <2>eins</2>.</1>"


def test_an_element_across_two_sentences_spans_both_translations():
    tree = ["One ", Element(0, ["two. Three"]), " four."]
    out = translate(tree, [("Eins zwei.", [(0, 0), (1, 1)]), ("Drei vier.", [(0, 0), (1, 1)])])
    assert render(out) == "Eins <0>zwei. Drei</0> vier."


def test_links_past_the_words_are_ignored():
    tree = ["a ", Element(0, ["b"]), "."]
    out = translate(tree, [("x y.", [(1, 7), (0, 0)])])
    assert "<0>" in render(out) and render(out).replace("<0>", "").replace("</0>", "") == "x y."
