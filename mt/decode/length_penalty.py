"""Length penalties: a hypothesis' score is ``logprob / lp(|Y|)``, |Y| counting the final EOS.

Without a penalty beam search prefers short outputs (every token adds a negative log-prob). The
penalties below divide the summed log-prob by a function of the length that grows with ``alpha > 0``:

- ``gnmt``: ``lp(L) = ((5 + L) / 6) ** alpha`` (Wu et al. 2016, "Google's NMT system", eq. 14);
- ``length``: ``lp(L) = L ** alpha`` (plain length normalisation; ``alpha = 1`` is the per-token mean);
- ``none``: ``lp(L) = 1``.

|Y| counts the pieces *and* the EOS the model generated (an empty output has |Y| = 1), so that
``lp`` is never evaluated at 0. Both penalties are monotone in L: non-decreasing for ``alpha >= 0``,
non-increasing for ``alpha < 0``; beam search relies on that for its stopping bound.
"""

from __future__ import annotations

PENALTIES = ("gnmt", "length", "none")


def check_penalty(name: str) -> None:
    """Raise ValueError for an unknown penalty name (fail before decoding starts)."""
    if name not in PENALTIES:
        raise ValueError(f"unknown length penalty {name!r}; expected one of {', '.join(PENALTIES)}")


def length_penalty(length: int, name: str, alpha: float) -> float:
    """``lp(length)``, ``length`` = |Y| with the EOS counted (>= 1)."""
    if name == "gnmt":
        return ((5.0 + length) / 6.0) ** alpha
    if name == "length":
        return float(length) ** alpha
    if name == "none":
        return 1.0
    check_penalty(name)
    raise AssertionError("unreachable")
