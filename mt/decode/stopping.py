"""When beam search is done with a sentence: its finished hypotheses and the stopping rules.

Scores: ``score = logprob / lp(|Y|)`` with |Y| = pieces + EOS (``mt.decode.length_penalty``). Every
rule stops a sentence at (a) its maximum length (only EOS was allowed: every live beam finished) and
at (c) the bound below; they differ in what else ends a sentence (``DecodeConfig.stopping``):

- ``exact``: nothing else. A sentence is done only when its ``nbest``-th best finished score cannot
  be beaten by any continuation of a live beam under the final penalised score, so no rule cuts the
  search short of what the beam could still find, for every penalty.
- ``topk_eos`` (OpenNMT-py's "top beam finished"): also done once the best candidate of a step, by
  raw cumulative log-prob, is EOS (and ``nbest`` are finished). Without a length penalty this never
  changes the result for nbest 1 (that EOS beats every live beam, and (c) stops there too); under a
  penalty that grows with the length it can: P(a) = .9, P(EOS|a) = .40, P(b|a) = .38,
  P(EOS|a b) = .99 ends with "a" (GNMT 0.6 score -0.931) although "a b" scores -0.911. With
  ``beam_size = 1`` this is exactly greedy search.
- ``fairseq``: also done once ``beam_size`` hypotheses are finished. EOS candidates of *poor* beams
  count too (a confident model gives every runner-up, EOS among them, about the same small
  probability), so a sentence can stop with K junk hypotheses before its best one ends (the
  number-words demo: greedy 99.8 BLEU, this rule 92.1).

The bound (c): a live beam with cumulative log-prob ``s <= 0`` after ``t`` pieces can only end with a
log-prob ``<= s`` (log-probs are <= 0) and a length L in ``[max(t, min_len) + 1, max_len + 1]`` (EOS
counted), so its final score is ``<= s / lp(L) <= s / max_L lp(L)``. Both penalties are monotone in
L, so ``max_L lp(L)`` is at one end of that range: ``lp(max_len + 1)`` for ``alpha >= 0`` (loose:
only the longest reachable length is safe) and the shortest for ``alpha < 0``; for ``none`` it is 1
and the bound is simply ``s``. The beam is sorted, so the best live ``s`` bounds them all. (c) alone
never cuts a search short; under ``exact`` it is the only early stop.

The default is ``topk_eos``: on a Multi30k transformer_mini (1,000 updates, beam 4, GNMT 0.6) the
rules gave valid BLEU 24.46 (topk_eos), 24.44 (exact), 24.44 (fairseq), test2016 25.01 / 25.19 /
25.19, with 13.3 / 19.0 / 15.8 decoder steps a sentence (exact about 25% fewer sentences/s): the
same quality within noise, and the shortcut is the fastest.
"""

from __future__ import annotations

from collections.abc import Sequence

from mt.decode.common import NEG_INF, Hypothesis
from mt.decode.length_penalty import length_penalty

STOPPING_RULES = ("exact", "topk_eos", "fairseq")


def check_stopping(name: str) -> None:
    """Raise ValueError for an unknown stopping rule (fail before decoding starts)."""
    if name not in STOPPING_RULES:
        raise ValueError(f"unknown stopping rule decode.stopping={name!r}; expected one of {', '.join(STOPPING_RULES)}")


class Finished:
    """Per-sentence finished hypotheses (the ``beam`` best by score) and the stopping rule over them.

    ``forced``: each sentence's forced first token or None (``mt.decode.common``): ``max_len``, ``min_len`` and the
    scores count it, the hypotheses leave it out."""

    def __init__(
        self, max_len: list[int], min_len: list[int], *, beam: int, nbest: int, penalty: str, alpha: float,
        stopping: str, forced: Sequence[int | None] | None = None,
    ) -> None:
        check_stopping(stopping)
        self.hyps: list[list[Hypothesis]] = [[] for _ in max_len]
        self.max_len, self.min_len = max_len, min_len
        self.beam, self.n_best = beam, nbest
        self.penalty, self.alpha, self.stopping = penalty, alpha, stopping
        self.forced = forced

    def forces(self, sentences: list[int]) -> bool:
        """Whether one of ``sentences`` has a forced first token."""
        return self.forced is not None and any(self.forced[s] is not None for s in sentences)

    def add(self, sent: int, tokens: list[int], logprob: float) -> None:
        """Record ``tokens`` (pieces, no EOS; the forced first token first, if any) ended by EOS, keeping the
        sentence's K best by score."""
        lp = length_penalty(len(tokens) + 1, self.penalty, self.alpha)
        hyps = self.hyps[sent]
        hyps.append(Hypothesis(tokens[1:] if self.forces([sent]) else tokens, logprob / lp, logprob))
        if len(hyps) > self.beam:
            hyps.remove(min(hyps, key=lambda h: h.score))

    def best_possible(self, sent: int, step: int, best_live: float) -> float:
        """The bound (c): the best final score any continuation of a live beam can reach, when the
        best live beam has cumulative log-prob ``best_live`` after ``step`` (0-based) was decoded."""
        # live beams hold step + 1 pieces and end with a length in [max(step + 1, min_len) + 1, max_len + 1]
        ends = (max(step + 1, self.min_len[sent]) + 1, self.max_len[sent] + 1)
        return best_live / max(length_penalty(n, self.penalty, self.alpha) for n in ends)

    def is_done(self, sent: int, step: int, best_live: float, top_is_eos: bool) -> bool:
        """The stopping rule (module docstring), after ``step`` (0-based) was decoded."""
        hyps = self.hyps[sent]
        if step >= self.max_len[sent] or best_live == NEG_INF:
            return True
        if len(hyps) < self.n_best:
            return False
        if self.stopping == "topk_eos" and top_is_eos:
            return True
        if self.stopping == "fairseq" and len(hyps) >= self.beam:
            return True
        nth_best = sorted((h.score for h in hyps), reverse=True)[self.n_best - 1]
        return nth_best >= self.best_possible(sent, step, best_live)

    def nbest(self, sent: int) -> list[Hypothesis]:
        return sorted(self.hyps[sent], key=lambda h: h.score, reverse=True)[: self.n_best]
