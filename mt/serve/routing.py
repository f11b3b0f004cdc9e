"""Which model(s) translate a language pair: a direct model, else two hops through one pivot language.

The rule, in order: (1) a model named by the request (``/v1/translate``'s ``model``) must serve the pair
directly; (2) the first model in the list (``--ckpt``/``--ct2`` flags in order, or ``--models``' entries)
that translates ``source -> target``; (3) a pivot language ``P`` with ``source -> P`` and ``P -> target``
both served directly, the pivots tried in the order the languages first appear in the list's pairs
(each hop's model again the first that serves it). A pair no rule reaches is not served. Nothing here
loads a model: routing reads each model's languages only.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass


@dataclass(frozen=True)
class Languages:
    """What one model translates: its name, its source and its targets (``tagged``: a tag picks the target)."""

    name: str
    source: str
    targets: tuple[str, ...]
    tagged: bool = False

    def serves(self, source: str, target: str) -> bool:
        return source == self.source and target in self.targets


def model_name(source: str, targets: Sequence[str]) -> str:
    """A model's default name: its pair (``en-de``), or its source and targets (``en-de+fr``)."""
    return f"{source}-{'+'.join(targets)}"


@dataclass(frozen=True)
class Hop:
    """One translation step: ``model`` turns ``source`` into ``target`` (``tag``: the target's tag, or None)."""

    model: str
    source: str
    target: str
    tag: str | None


@dataclass(frozen=True)
class Route:
    hops: tuple[Hop, ...]

    @property
    def models(self) -> list[str]:
        return [hop.model for hop in self.hops]

    @property
    def first(self) -> Hop:
        return self.hops[0]


class NoRoute(Exception):
    """The pair is not served; the message names the pairs that are."""


class Router:
    """Routes over the models' languages, in the list's order (see the module docstring)."""

    def __init__(self, models: Sequence[Languages]) -> None:
        self.models = list(models)

    def direct(self, source: str, target: str) -> Hop | None:
        for m in self.models:
            if m.serves(source, target):
                return Hop(m.name, source, target, target if m.tagged else None)
        return None

    def route(self, source: str, target: str, model: str | None = None) -> Route:
        """The route of ``source -> target`` (by ``model`` alone, when named); NoRoute if there is none."""
        if model is not None:
            return Route((self.named_hop(model, source, target),))
        if (hop := self.direct(source, target)) is not None:
            return Route((hop,))
        for pivot in self.languages():
            if pivot in (source, target):
                continue
            first, second = self.direct(source, pivot), self.direct(pivot, target)
            if first is not None and second is not None:
                return Route((first, second))
        raise NoRoute(f"{source} -> {target} is not served ({self.describe()})")

    def named_hop(self, name: str, source: str, target: str) -> Hop:
        found = [m for m in self.models if m.name == name]
        if not found:
            raise NoRoute(f"no model {name} (the models: {', '.join(m.name for m in self.models)})")
        m = found[0]
        if not m.serves(source, target):
            raise NoRoute(f"model {name} does not translate {source} -> {target} ({self.describe([m])})")
        return Hop(m.name, source, target, target if m.tagged else None)

    def languages(self) -> list[str]:
        """Every language of the list, in order of first appearance (sources before their targets)."""
        return list(dict.fromkeys(lang for m in self.models for lang in (m.source, *m.targets)))

    def sources(self) -> list[str]:
        """The languages some model reads, in the list's order."""
        return list(dict.fromkeys(m.source for m in self.models))

    def targets_of(self, source: str) -> list[str]:
        """What ``source`` reaches, directly first (in the list's order), then through a pivot."""
        direct = [t for m in self.models if m.source == source for t in m.targets]
        pivoted = [t for p in direct for m in self.models if m.source == p for t in m.targets]
        return [t for t in dict.fromkeys(direct + pivoted) if t != source]

    def describe(self, models: Sequence[Languages] | None = None) -> str:
        """``served: en -> de, fr; de -> en`` (the pairs of ``models``, all by default)."""
        by_source: dict[str, list[str]] = {}
        for m in models if models is not None else self.models:
            by_source.setdefault(m.source, []).extend(t for t in m.targets if t not in by_source.get(m.source, []))
        return "served: " + "; ".join(f"{s} -> {', '.join(ts)}" for s, ts in by_source.items())
