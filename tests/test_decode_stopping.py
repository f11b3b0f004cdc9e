"""Beam search honours its length penalty (stopping rule ``exact``) and ``min_len``, on scripted tables.

The scripted-model harness is tests/test_decode_scripted.py's: a next-token table per prefix.
Vocabulary: PAD=0 UNK=1 BOS=2 EOS=3, a=4, b=5 (UNK is an ordinary piece here).
"""

from __future__ import annotations

import itertools
import math
from dataclasses import replace

import pytest
import torch
from test_decode_scripted import A, B, ScriptedModel, Table, cfg_of, lp, source

from mt.data.tokenizer import EOS_ID, UNK_ID
from mt.decode import beam_search, greedy_search, sample
from mt.decode.stopping import Finished

# The scripted case: P(a) = .9; P(EOS|a) = .40, P(b|a) = .38; P(EOS|a b) = .99. Under GNMT 0.6
# "a b" scores (log .9 + log .38 + log .99) / lp(3) = -0.911 and "a" (log .9 + log .40) / lp(2) = -0.931.
PENALISED: Table = {
    (): {A: 0.9, B: 0.06, EOS_ID: 0.04},
    (A,): {EOS_ID: 0.40, B: 0.38, A: 0.22},
    (A, B): {EOS_ID: 0.99, A: 0.005, B: 0.005},
}
A_B = (math.log(0.9) + math.log(0.38) + math.log(0.99)) / lp("gnmt", 0.6, 3)
A_ONLY = (math.log(0.9) + math.log(0.40)) / lp("gnmt", 0.6, 2)


@pytest.mark.parametrize("beam", [1, 2])
def test_exact_stopping_finds_the_longer_hypothesis_a_length_penalty_prefers(beam: int) -> None:
    assert A_B == pytest.approx(-0.911, abs=1e-3) and A_ONLY == pytest.approx(-0.931, abs=1e-3)
    src, mask = source([3])
    cfg = cfg_of(beam_size=beam, length_penalty="gnmt", alpha=0.6, min_len=1, stopping="exact")
    (exact,) = beam_search(ScriptedModel([PENALISED]), src, mask, cfg)
    assert exact[0].tokens == [A, B] and exact[0].score == pytest.approx(A_B, abs=1e-6)
    # the raw-top-EOS shortcut stops at step 1, where EOS after "a" is the best candidate
    (shortcut,) = beam_search(ScriptedModel([PENALISED]), src, mask, replace(cfg, stopping="topk_eos"))
    assert shortcut[0].tokens == [A] and shortcut[0].score == pytest.approx(A_ONLY, abs=1e-6)
    if beam == 1:  # greedy stops there too; beam 1 under exact keeps the runner-up "a b" alive
        assert greedy_search(ScriptedModel([PENALISED]), src, mask, cfg)[0][0].tokens == [A]


def random_table(gen: torch.Generator, depth: int) -> Table:
    """A random next-token distribution over EOS, UNK, a, b for every prefix of up to ``depth`` pieces."""
    pieces = (UNK_ID, A, B)
    table: Table = {}
    for n in range(depth + 1):
        for prefix in itertools.product(pieces, repeat=n):
            probs = (torch.rand(4, generator=gen) ** 3 + 1e-3).tolist()  # skewed, never 0
            total = sum(probs)
            table[prefix] = {tok: p / total for tok, p in zip((EOS_ID, *pieces), probs, strict=True)}
    return table


def exhaustive(table: Table, max_len: int, min_len: int, name: str, alpha: float) -> list[tuple[float, tuple]]:
    """Every output of ``min_len``..``max_len`` pieces scored as beam search scores it, best first."""
    scored = []
    for n in range(min_len, max_len + 1):
        for tokens in itertools.product((UNK_ID, A, B), repeat=n):
            logprob = sum(math.log(table[tokens[:i]][tok]) for i, tok in enumerate(tokens))
            logprob += math.log(table[tokens][EOS_ID])  # at max_len EOS is forced, its log-prob kept
            scored.append((logprob / lp(name, alpha, n + 1), tokens))
    return sorted(scored, reverse=True)


@pytest.mark.parametrize(
    ("name", "alpha"), [("gnmt", 0.6), ("gnmt", 2.0), ("length", 1.0), ("length", -0.5), ("none", 0.0)]
)
@pytest.mark.parametrize("min_len", [0, 1])
def test_exact_beam_search_equals_exhaustive_search_when_the_beam_covers_the_space(
    name: str, alpha: float, min_len: int
) -> None:
    """3 pieces + EOS, at most 4 pieces: at most 27 x 4 candidates a step, all inside a beam of 128."""
    gen = torch.Generator().manual_seed(11)
    src, mask = source([4])
    shortcut_differs = 0
    for _ in range(6):
        table = random_table(gen, depth=4)
        best = exhaustive(table, 4, min_len, name, alpha)[:3]
        cfg = cfg_of(
            beam_size=128, nbest=3, max_len_b=4, length_penalty=name, alpha=alpha, min_len=min_len, stopping="exact"
        )
        (nbest,) = beam_search(ScriptedModel([table]), src, mask, cfg)
        assert [tuple(h.tokens) for h in nbest] == [tokens for _, tokens in best]
        assert [h.score for h in nbest] == pytest.approx([score for score, _ in best], abs=1e-5)
        (shortcut,) = beam_search(ScriptedModel([table]), src, mask, replace(cfg, nbest=1, stopping="topk_eos"))
        shortcut_differs += tuple(shortcut[0].tokens) != best[0][1]
    if name == "none":
        assert shortcut_differs == 0  # without a penalty the shortcut finds the best output too
    if (name, alpha, min_len) == ("length", 1.0, 1):
        assert shortcut_differs > 0  # tables where the shortcut misses the best: the check tells rules apart


# the most likely output is empty: EOS first with .8
EMPTY_FIRST: Table = {
    (): {EOS_ID: 0.8, A: 0.15, B: 0.05},
    (A,): {EOS_ID: 0.9, A: 0.05, B: 0.05},
    (B,): {EOS_ID: 0.9, A: 0.05, B: 0.05},
    (A, A): {EOS_ID: 0.9, A: 0.05, B: 0.05},
}


@pytest.mark.parametrize("search", [beam_search, greedy_search])
def test_min_len_bans_eos_before_it(search) -> None:
    src, mask = source([3])
    (empty,) = search(ScriptedModel([EMPTY_FIRST]), src, mask, cfg_of(min_len=0))
    assert empty[0].tokens == [] and empty[0].logprob == pytest.approx(math.log(0.8), abs=1e-6)
    (one,) = search(ScriptedModel([EMPTY_FIRST]), src, mask, cfg_of(min_len=1))
    assert one[0].tokens == [A]  # the model's own log-probs, not renormalised without EOS
    assert one[0].logprob == pytest.approx(math.log(0.15 * 0.9), abs=1e-6)
    (two,) = search(ScriptedModel([EMPTY_FIRST]), src, mask, cfg_of(min_len=2))
    assert two[0].tokens == [A, A] and two[0].logprob == pytest.approx(math.log(0.15 * 0.05 * 0.9), abs=1e-6)
    (capped,) = search(ScriptedModel([EMPTY_FIRST]), src, mask, cfg_of(min_len=5, max_len_b=2))
    assert len(capped[0].tokens) == 2  # min_len never goes past max_len (where only EOS is allowed)


def test_sampling_honours_min_len() -> None:
    src, mask = source([3] * 40)
    model = ScriptedModel([EMPTY_FIRST] * 40)
    assert sum(not r[0].tokens for r in sample(model, src, mask, cfg_of(strategy="sample", min_len=0))) > 20
    drawn = sample(ScriptedModel([EMPTY_FIRST] * 40), src, mask, cfg_of(strategy="sample", min_len=1))
    assert all(len(r[0].tokens) >= 1 for r in drawn)


def test_defaults_min_len_1_and_the_rule_measured_best() -> None:
    from mt.config import DecodeConfig

    assert DecodeConfig().min_len == 1 and DecodeConfig().stopping == "topk_eos"
    src, mask = source([3])
    cfg = replace(cfg_of(), min_len=DecodeConfig().min_len)
    assert beam_search(ScriptedModel([EMPTY_FIRST]), src, mask, cfg)[0][0].tokens != []


def test_bound_is_the_best_score_a_live_beam_can_reach() -> None:
    # max_len 10: a live beam with 2 pieces ends with |Y| in [3, 11]; min_len 5 raises the low end to 6
    for name, alpha, lengths in (("gnmt", 0.6, 11), ("length", -0.5, 3), ("none", 0.0, 1)):
        finished = Finished([10], [0], beam=2, nbest=1, penalty=name, alpha=alpha, stopping="exact")
        assert finished.best_possible(0, 1, -2.0) == pytest.approx(-2.0 / lp(name, alpha, lengths))
    finished = Finished([10], [5], beam=2, nbest=1, penalty="length", alpha=-0.5, stopping="exact")
    assert finished.best_possible(0, 1, -2.0) == pytest.approx(-2.0 / lp("length", -0.5, 6))


def test_fairseq_rule_stops_once_beam_size_are_finished() -> None:
    from test_decode_scripted import CONFIDENT

    src, mask = source([3])
    model = ScriptedModel([CONFIDENT])
    (nbest,) = beam_search(model, src, mask, cfg_of(beam_size=2, nbest=2, stopping="fairseq"))
    assert [h.tokens for h in nbest] == [[], [A]]  # the junk of steps 0 and 1 fill K=2: [a a] never reached
    assert model.batch_sizes == [1, 2]
    (exact,) = beam_search(ScriptedModel([CONFIDENT]), src, mask, cfg_of(beam_size=2, stopping="exact"))
    assert exact[0].tokens == [A, A]
