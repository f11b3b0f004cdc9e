"""Search on a scripted model: a fixed probability table per prefix pins exact tokens and scores.

Like fairseq's ``test_sequence_generator``: the "model" is a plain Python object whose next-token
distribution depends only on (sentence, prefix), so the expected beams can be worked out by hand.
Vocabulary: PAD=0 UNK=1 BOS=2 EOS=3, a=4, b=5.
"""

from __future__ import annotations

import math
from dataclasses import replace

import pytest
import torch

from mt.config import DecodeConfig
from mt.data.tokenizer import BOS_ID, EOS_ID, PAD_ID, UNK_ID
from mt.decode import beam_search, greedy_search

A, B = 4, 5
V = 6
Table = dict[tuple[int, ...], dict[int, float]]


class ScriptedEnc:
    def __init__(self, sent: torch.Tensor) -> None:
        self.sent = sent  # (N,) the sentence each row belongs to

    def reorder(self, index: torch.Tensor) -> ScriptedEnc:
        self.sent = self.sent.index_select(0, index)
        return self


class ScriptedCache:
    """Keeps each row's prefix and sentence; ``reorder`` follows the beams like the real cache.

    With ``beams_per_sentence`` (beam search's cache) the encoder output holds one row per sentence
    and the rows are sentences x beams, as with ``mt.model.BeamCache``."""

    def __init__(self, beams_per_sentence: int | None = None) -> None:
        self.prefixes: list[tuple[int, ...]] | None = None
        self.sent: torch.Tensor | None = None
        self.beams_per_sentence = beams_per_sentence

    def reorder(self, index: torch.Tensor) -> ScriptedCache:
        assert self.prefixes is not None and self.sent is not None
        self.prefixes = [self.prefixes[i] for i in index.tolist()]
        self.sent = self.sent.index_select(0, index)
        return self


class ScriptedModel:
    """``tables[sentence][prefix] -> {token: prob}``; unlisted prefixes use ``default``."""

    def __init__(self, tables: list[Table], default: dict[int, float] | None = None) -> None:
        self.tables = tables
        self.default = default or {EOS_ID: 0.1, A: 0.45, B: 0.45}
        self.batch_sizes: list[int] = []  # rows of every decode call

    def encode(self, src: torch.Tensor, src_pad_mask: torch.Tensor) -> ScriptedEnc:
        return ScriptedEnc(torch.arange(src.size(0)))

    def new_cache(self, beams_per_sentence: int | None = None) -> ScriptedCache:
        return ScriptedCache(beams_per_sentence)

    def decode(self, tgt_in: torch.Tensor, enc: ScriptedEnc, cache: ScriptedCache | None = None) -> torch.Tensor:
        assert cache is not None and tgt_in.size(1) == 1
        self.batch_sizes.append(tgt_in.size(0))
        beams = tgt_in.size(0) // enc.sent.numel()  # rows per encoder row: 1, or the beams of a sentence
        assert beams * enc.sent.numel() == tgt_in.size(0) and (beams == 1 or cache.beams_per_sentence == beams)
        rows_sent = enc.sent.repeat_interleave(beams)  # (N,) the sentence of each row, by the encoder output
        if cache.prefixes is None:
            cache.prefixes, cache.sent = [() for _ in range(tgt_in.size(0))], rows_sent
        assert torch.equal(cache.sent, rows_sent), "cache and encoder output rows disagree"
        logits = torch.full((tgt_in.size(0), 1, V), -math.inf)
        for row, tok in enumerate(tgt_in[:, 0].tolist()):
            prefix = () if tok == BOS_ID else (*cache.prefixes[row], tok)
            cache.prefixes[row] = prefix
            probs = self.tables[int(rows_sent[row])].get(prefix, self.default)
            for t, p in probs.items():
                logits[row, 0, t] = math.log(p)
        return logits


# Worked by hand with beam 2 (candidates = top 4):
# step 0: () -> a .5, b .4, eos .1: top 2 = a, b (no EOS); live: [a] .5, [b] .4
# step 1: [a] .3 (eos), [b a] .36, [a a] .125, [a b] .075, [b eos] .02: top 2 = [b a], [a]+EOS
#         -> finished [a] (logprob log .3, |Y| = 2); live: [b a] .36, [a a] .125
# step 2: [b a]+EOS .18, [b a a] .108, [a a]+EOS .1: top 2 = [b a]+EOS, [b a a]
#         -> finished [b a] (log .18, |Y| = 3): 2 = beam finished, the sentence stops.
HAND: Table = {
    (): {A: 0.5, B: 0.4, EOS_ID: 0.1},
    (A,): {EOS_ID: 0.6, A: 0.25, B: 0.15},
    (B,): {A: 0.9, EOS_ID: 0.05, B: 0.05},
    (B, A): {EOS_ID: 0.5, A: 0.3, B: 0.2},
    (A, A): {EOS_ID: 0.8, A: 0.1, B: 0.1},
}
# step 1: [b a] .36, [a]+EOS .30, [a a] .125, [a b] .075: the beam must refill from the 3rd candidate
# ([a a]), which wins the 2nd place at step 2: [b a a] .324, [a a]+EOS .1125 (then 2 = beam finished)
REFILL: Table = {
    (): {A: 0.5, B: 0.4, EOS_ID: 0.1},
    (A,): {EOS_ID: 0.6, A: 0.25, B: 0.15},
    (B,): {A: 0.9, EOS_ID: 0.05, B: 0.05},
    (B, A): {A: 0.9, B: 0.06, EOS_ID: 0.04},
    (A, A): {EOS_ID: 0.9, A: 0.05, B: 0.05},
}
# EOS is the best first step (rule (b), the top candidate ended the sentence): one step
EARLY: Table = {(): {EOS_ID: 0.7, A: 0.2, B: 0.1}, (A,): {EOS_ID: 1.0}, (B,): {EOS_ID: 1.0}}
# with a length limit of 2: step 1 keeps [a a] .42, [a b] .21; step 2 may only produce EOS (p .1 each)
LIMITED: Table = {
    (): {A: 0.7, B: 0.2, EOS_ID: 0.1},
    (A,): {A: 0.6, B: 0.3, EOS_ID: 0.1},
    (B,): {A: 0.5, B: 0.4, EOS_ID: 0.1},
}


def cfg_of(**overrides) -> DecodeConfig:
    """Beam 2, no penalty, 10 pieces at most; EOS allowed at step 0 (the tables above use it)."""
    base = DecodeConfig(
        beam_size=2, nbest=1, length_penalty="none", alpha=0.0, max_len_a=0.0, max_len_b=10, min_len=0
    )
    return replace(base, **overrides)


def source(lengths: list[int]) -> tuple[torch.Tensor, torch.Tensor]:
    """Sources of the given piece counts (+ EOS), padded: src (B, S), src_pad_mask (B, S)."""
    src = torch.full((len(lengths), max(lengths) + 1), PAD_ID)
    for row, n in enumerate(lengths):
        src[row, :n] = A
        src[row, n] = EOS_ID
    return src, src == PAD_ID


def lp(name: str, alpha: float, length: int) -> float:
    return {"gnmt": ((5 + length) / 6) ** alpha, "length": length**alpha, "none": 1.0}[name]


@pytest.mark.parametrize(
    ("name", "alpha", "order"),
    [
        ("none", 0.0, [[A], [B, A]]),
        ("gnmt", 0.6, [[A], [B, A]]),  # log .3 / (7/6)^.6 = -1.098 > log .18 / (8/6)^.6 = -1.443
        ("gnmt", 3.0, [[B, A], [A]]),  # -0.758 < -0.724: the longer one wins
        ("length", 1.0, [[B, A], [A]]),  # log .3 / 2 = -0.602 < log .18 / 3 = -0.572
    ],
)
def test_beam_hand_worked_nbest(name: str, alpha: float, order: list[list[int]]) -> None:
    # the steps worked by hand above follow rule topk_eos (see test_decode_stopping for exact)
    model = ScriptedModel([HAND])
    src, mask = source([3])
    (nbest,) = beam_search(model, src, mask, cfg_of(nbest=2, length_penalty=name, alpha=alpha, stopping="topk_eos"))
    logprob = {(A,): math.log(0.3), (B, A): math.log(0.18)}
    assert [h.tokens for h in nbest] == order
    for h in nbest:
        expected = logprob[tuple(h.tokens)]
        assert h.logprob == pytest.approx(expected, abs=1e-6)
        assert h.score == pytest.approx(expected / lp(name, alpha, len(h.tokens) + 1), abs=1e-6)
    assert nbest[0].score > nbest[1].score
    assert model.batch_sizes == [1, 2, 2]  # three steps (step 0: one row), then 2 = beam finished


def test_finished_hypotheses_do_not_starve_the_beam() -> None:
    model = ScriptedModel([REFILL])
    src, mask = source([3])
    (nbest,) = beam_search(model, src, mask, cfg_of(nbest=2))
    assert [h.tokens for h in nbest] == [[A], [A, A]]
    assert [h.logprob for h in nbest] == pytest.approx([math.log(0.3), math.log(0.1125)], abs=1e-6)


@pytest.mark.parametrize("stopping", ["topk_eos", "exact"])  # without a penalty the bound stops here too
def test_beam_stops_when_the_top_candidate_is_eos(stopping: str) -> None:
    model = ScriptedModel([EARLY])
    src, mask = source([3])
    (nbest,) = beam_search(model, src, mask, cfg_of(stopping=stopping))
    assert [h.tokens for h in nbest] == [[]]
    assert nbest[0].score == pytest.approx(math.log(0.7), abs=1e-6)
    assert model.batch_sizes == [1]  # log .7 > log .2 (best live): no second step


# the best first step is a, so rule (b) (top candidate is EOS) does not fire; [] finishes from rank 2
LATE: Table = {(): {A: 0.5, EOS_ID: 0.4, B: 0.1}, (A,): {A: 0.45, B: 0.45, EOS_ID: 0.1}, (B,): {EOS_ID: 1.0}}


def test_beam_bound_stops_when_no_live_beam_can_catch_up() -> None:
    # step 0: finished [] log .4 = -0.916; live [a] -0.693 could still win: go on. step 1: the best
    # candidates [a a], [a b] have log .225 = -1.492 < -0.916 and no penalty: stop by the bound (c).
    model = ScriptedModel([LATE])
    src, mask = source([3])
    (nbest,) = beam_search(model, src, mask, cfg_of())
    assert nbest[0].tokens == [] and nbest[0].logprob == pytest.approx(math.log(0.4), abs=1e-6)
    assert model.batch_sizes == [1, 2]


def test_beam_bound_with_growing_penalty_keeps_searching() -> None:
    # length penalty, alpha 1: a live beam may still end with |Y| = max_len + 1 = 11, so the bound
    # -1.492 / 11 = -0.136 cannot rule it out against -0.916; with EOS never the top candidate (p .1
    # against .45) the search runs to the length limit: 11 decode steps.
    model = ScriptedModel([LATE])
    src, mask = source([3])
    beam_search(model, src, mask, cfg_of(length_penalty="length", alpha=1.0, max_len_b=10))
    assert model.batch_sizes == [1] + [2] * 10


# a confident model: every runner-up (EOS included) has p .01, as under label smoothing
CONFIDENT: Table = {
    (): {A: 0.98, EOS_ID: 0.01, B: 0.01},
    (A,): {A: 0.98, EOS_ID: 0.01, B: 0.01},
    (B,): {A: 0.98, EOS_ID: 0.01, B: 0.01},
    (A, A): {EOS_ID: 0.98, A: 0.01, B: 0.01},
}


def test_junk_eos_candidates_do_not_end_the_search_early() -> None:
    # Regression (number-words demo, beam 92.1 BLEU vs greedy 99.8): with fairseq's "stop once K are
    # finished", [] (step 0) and [a] (step 1) fill the K=2 slots and [a a] (log .94) is never reached.
    model = ScriptedModel([CONFIDENT])
    src, mask = source([3])
    (nbest,) = beam_search(model, src, mask, cfg_of(beam_size=2))
    assert nbest[0].tokens == [A, A]
    assert nbest[0].logprob == pytest.approx(3 * math.log(0.98), abs=1e-6)
    assert model.batch_sizes == [1, 2, 2]


def test_beam_max_length_forces_eos() -> None:
    model = ScriptedModel([LIMITED])
    src, mask = source([2])
    nbest = beam_search(model, src, mask, cfg_of(nbest=2, max_len_a=1.0, max_len_b=0))[0]
    assert [h.tokens for h in nbest] == [[A, A], [A, B]]
    assert [h.logprob for h in nbest] == pytest.approx([math.log(0.042), math.log(0.021)], abs=1e-6)
    assert model.batch_sizes == [1, 2, 2]


def test_finished_sentences_leave_the_batch() -> None:
    # per-sentence limits: max_len = |src| (a=1, b=0): 2, 1 and 5 pieces
    model = ScriptedModel([LIMITED, EARLY, HAND])
    src, mask = source([2, 1, 5])
    results = beam_search(model, src, mask, cfg_of(max_len_a=1.0, max_len_b=0))
    assert [r[0].tokens for r in results] == [[A, A], [], [A]]
    assert [r[0].logprob for r in results] == pytest.approx([math.log(x) for x in (0.042, 0.7, 0.3)], abs=1e-6)
    assert model.batch_sizes == [3, 4, 4]  # step 0 one row a sentence; sentence 1 leaves after it


def test_pad_and_bos_are_never_generated_but_unk_is() -> None:
    table: Table = {(): {PAD_ID: 0.5, BOS_ID: 0.3, UNK_ID: 0.15, EOS_ID: 0.05}, (UNK_ID,): {EOS_ID: 1.0}}
    src, mask = source([1])
    for search in (beam_search, greedy_search):
        (nbest,) = search(ScriptedModel([table]), src, mask, cfg_of(beam_size=1))
        assert nbest[0].tokens == [UNK_ID]
        assert nbest[0].logprob == pytest.approx(math.log(0.15), abs=1e-6)


@pytest.mark.parametrize(
    ("name", "alpha", "stopping"),
    [("none", 0.0, "exact"), ("none", 0.0, "topk_eos"), ("gnmt", 0.6, "topk_eos"), ("length", -0.5, "topk_eos")],
)
def test_beam_one_is_greedy_on_scripted_tables(name: str, alpha: float, stopping: str) -> None:
    cfg = cfg_of(beam_size=1, length_penalty=name, alpha=alpha, max_len_a=1.0, max_len_b=0, stopping=stopping)
    src, mask = source([2, 1, 5])
    tables = [LIMITED, EARLY, HAND]
    greedy_model, beam_model = ScriptedModel(tables), ScriptedModel(tables)
    assert beam_search(beam_model, src, mask, cfg) == greedy_search(greedy_model, src, mask, cfg)
    assert beam_model.batch_sizes == greedy_model.batch_sizes


def test_invalid_settings_fail_fast() -> None:
    src, mask = source([1])
    with pytest.raises(ValueError, match="nbest"):
        beam_search(ScriptedModel([HAND]), src, mask, cfg_of(nbest=3))
    with pytest.raises(ValueError, match="length penalty"):
        beam_search(ScriptedModel([HAND]), src, mask, cfg_of(length_penalty="wu"))
    with pytest.raises(ValueError, match="decode.stopping='first'"):
        beam_search(ScriptedModel([HAND]), src, mask, cfg_of(stopping="first"))
    for search in (beam_search, greedy_search):
        with pytest.raises(ValueError, match="decode.min_len must be >= 0"):
            search(ScriptedModel([HAND]), src, mask, cfg_of(min_len=-1))


@pytest.mark.parametrize("vocab", [8000, 8003, 40])
def test_topk_rows_matches_topk(vocab: int) -> None:
    """The chunked top-k gives topk's values, and ids that hold those values, on hard rows too."""
    from mt.decode.common import topk_rows

    g = torch.Generator().manual_seed(0)
    scores = torch.randn(6, vocab, generator=g)
    scores[1] = torch.randint(0, 3, (vocab,), generator=g).float()  # many ties
    scores[2] = -math.inf
    scores[2, 7] = -1.0  # one finite entry (a row at its length limit: only EOS)
    scores[3, : vocab // 2] = -math.inf  # whole chunks banned
    scores[4, -5:] = 50.0  # the best ids all in the last chunk
    for k in (1, 2, 8):
        values, ids = topk_rows(scores, k)
        expected = scores.topk(k, dim=1).values
        assert torch.equal(values, expected)
        assert torch.equal(scores.gather(1, ids), values)
        finite = values.isfinite()
        for row in range(scores.size(0)):  # the finite ids are distinct
            assert len(set(ids[row][finite[row]].tolist())) == int(finite[row].sum())


@pytest.mark.parametrize("vocab", [8000, 8003, 128, 40])
def test_argmax_rows_is_argmax(vocab: int) -> None:
    """The chunked argmax gives argmax's ids exactly: the first of tied maxima, all -inf rows, NaN."""
    from mt.decode.common import argmax_rows

    g = torch.Generator().manual_seed(0)
    scores = torch.randn(8, vocab, generator=g)
    scores[1] = torch.randint(0, 3, (vocab,), generator=g).float()  # the maximum in many places
    scores[2] = -math.inf  # nothing allowed: argmax says 0
    scores[3] = -math.inf
    scores[3, vocab - 1] = -1.0  # one finite entry, in the last chunk
    scores[4, : vocab // 2] = -math.inf  # whole chunks banned
    scores[5, [3, vocab // 2, vocab - 2]] = 99.0  # a tie across chunks: the first one wins
    scores[6, [5, vocab - 1]] = math.nan  # NaN counts as the largest, the first one
    assert torch.equal(argmax_rows(scores), scores.argmax(dim=1))
    assert argmax_rows(scores[:0]).shape == (0,)
