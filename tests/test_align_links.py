"""Joining the two directions of word links (``mt.decode.align.symmetrise``): the rules, on small examples."""

from __future__ import annotations

import pytest

from mt.decode.align import grow_diag_final_and, symmetrise

# (source word, target word); target-to-source links (one per target word) and source-to-target ones
FORWARD = {(0, 0), (1, 1), (1, 2), (3, 3)}
REVERSE = {(0, 0), (1, 1), (2, 2), (3, 0)}


def test_grow_diag_final_and_grows_the_intersection_by_neighbours_then_adds_lone_links():
    """(0,0), (1,1): both directions. (1,2) and (2,2) neighbour (1,1) and each aligns a new word: grown, and
    (3,3) then, diagonal to (2,2). (3,0) is far from the rest and both its words are aligned by then: left out."""
    assert grow_diag_final_and(FORWARD, REVERSE) == {(0, 0), (1, 1), (1, 2), (2, 2), (3, 3)}


def test_grow_diag_final_and_lies_between_intersection_and_union():
    for forward, reverse in [(FORWARD, REVERSE), (REVERSE, FORWARD), ({(0, 1)}, {(1, 0)}), (set(), {(2, 2)})]:
        joined = grow_diag_final_and(forward, reverse)
        assert forward & reverse <= joined <= forward | reverse


def test_a_lone_link_between_unaligned_words_is_kept():
    assert grow_diag_final_and({(0, 1)}, {(1, 0)}) == {(0, 1), (1, 0)}  # no intersection: final-and adds both


def test_symmetrise_by_name():
    assert symmetrise(FORWARD, REVERSE, "union") == FORWARD | REVERSE
    assert symmetrise(FORWARD, REVERSE, "target") == FORWARD
    assert symmetrise(FORWARD, REVERSE, "grow-diag-final-and") == grow_diag_final_and(FORWARD, REVERSE)
    with pytest.raises(ValueError, match="symmetrisation must be one of"):
        symmetrise(FORWARD, REVERSE, "intersection")
