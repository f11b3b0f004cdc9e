"""Which model(s) translate a language pair: a direct model, else two hops through one pivot language.

The rule, in order: (1) a model named by the request (``/v1/translate``'s ``model``) must serve the pair
directly; (2) the first model in the list (``--ckpt``/``--ct2`` flags in order, or ``--models``' entries)
that translates ``source -> target``; (3) a pivot language ``P`` with ``source -> P`` and ``P -> target``
both served directly, the pivots tried in the order the languages first appear in the list's pairs
(each hop's model again the first that serves it). A pair no rule reaches is not served. Nothing here
loads a model: routing reads each model's languages only.

A model with language codes (M2M-100, NLLB) reads any of its languages (``Languages.sources``) and is served under
LibreTranslate's codes (``mt.serve.language_codes``): its hops carry its own codes of the languages (``Hop.tag``,
``Hop.source_code``), and a request may name a language by the model's own code (``Router.served``).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass


@dataclass(frozen=True)
class Languages:
    """What one model translates: its name, its source and its targets (``tagged``: a tag picks the target).

    A model with language codes reads several sources: ``sources`` lists them all (``source``, its default, first)
    and each request's source is given to it as a code (``Hop.source_code``); ``codes`` pairs each served code with
    the model's own where they differ (``de`` with NLLB's ``deu_Latn``).
    """

    name: str
    source: str
    targets: tuple[str, ...]
    tagged: bool = False
    sources: tuple[str, ...] = ()
    codes: tuple[tuple[str, str], ...] = ()

    @property
    def reads(self) -> tuple[str, ...]:
        """Every source language it translates from."""
        return self.sources or (self.source,)

    def serves(self, source: str, target: str) -> bool:
        return source in self.reads and target in self.targets

    def own_code(self, lang: str) -> str:
        """The model's own code of the served language ``lang``."""
        return dict(self.codes).get(lang, lang)

    def hop(self, source: str, target: str) -> Hop:
        """The hop of ``source -> target`` by this model, with its own codes of what it reads as tags."""
        return Hop(self.name, source, target, self.own_code(target) if self.tagged else None,
                   self.own_code(source) if self.sources else None)


def model_name(source: str, targets: Sequence[str]) -> str:
    """A model's default name: its pair (``en-de``), or its source and targets (``en-de+fr``)."""
    return f"{source}-{'+'.join(targets)}"


@dataclass(frozen=True)
class Hop:
    """One translation step: ``model`` turns ``source`` into ``target`` (``tag``: the target's tag, or None;
    ``source_code``: the source's code for a model with language codes, or None)."""

    model: str
    source: str
    target: str
    tag: str | None
    source_code: str | None = None


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
        self._served = set(self.languages())
        self._aliases = {own: shown for m in self.models for shown, own in m.codes}
        self._targets: dict[str, list[str]] = {}  # targets_of, computed once a source

    def served(self, lang: str) -> str:
        """A request's language as the models serve it: a model's own code (NLLB's ``deu_Latn``) is the code it is
        served under (``de``); any other code stays as it is."""
        return lang if lang in self._served else self._aliases.get(lang, lang)

    def direct(self, source: str, target: str) -> Hop | None:
        for m in self.models:
            if m.serves(source, target):
                return m.hop(source, target)
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
        return m.hop(source, target)

    def languages(self) -> list[str]:
        """Every language of the list, in order of first appearance (sources before their targets)."""
        return list(dict.fromkeys(lang for m in self.models for lang in (*m.reads, *m.targets)))

    def sources(self) -> list[str]:
        """The languages some model reads, in the list's order."""
        return list(dict.fromkeys(lang for m in self.models for lang in m.reads))

    def targets_of(self, source: str) -> list[str]:
        """What ``source`` reaches, directly first (in the list's order), then through a pivot."""
        if source not in self._targets:
            direct = [t for m in self.models if source in m.reads for t in m.targets]
            pivoted: list[str] = []
            expanded: set[int] = set()  # a model's targets once: through another pivot they add nothing new
            for pivot in dict.fromkeys(direct):
                for i, m in enumerate(self.models):
                    if i not in expanded and pivot in m.reads:
                        expanded.add(i)
                        pivoted.extend(m.targets)
            self._targets[source] = [t for t in dict.fromkeys(direct + pivoted) if t != source]
        return list(self._targets[source])

    def describe(self, models: Sequence[Languages] | None = None) -> str:
        """``served: en -> de, fr; de -> en`` (the pairs of ``models``, all by default); a model that reads several
        sources as ``between any two of en, de, fr`` (or ``en, de -> de, fr``)."""
        by_source: dict[str, list[str]] = {}
        several = []
        for m in models if models is not None else self.models:
            if m.sources:
                several.append(describe_several(m))
                continue
            by_source.setdefault(m.source, []).extend(t for t in m.targets if t not in by_source.get(m.source, []))
        return "served: " + "; ".join([*(f"{s} -> {', '.join(ts)}" for s, ts in by_source.items()), *several])


def describe_several(m: Languages) -> str:
    """The pairs of a model that reads several sources, in one phrase."""
    if set(m.sources) == set(m.targets):
        return f"between any two of {', '.join(m.sources)}"
    return f"{', '.join(m.sources)} -> {', '.join(m.targets)}"
