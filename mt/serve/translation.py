"""A request's documents through the models: detect their language, route, plan sentences, translate hop by hop.

``route_documents`` groups a request's documents by route (``source=auto``: each document's detected
language; the router's rule: ``mt.serve.routing``) and plans each group's sentences with its first model
(its sentence splitter's language, its length limit). ``translate_groups`` sends each group's sentences
through its hops, one job a hop: a pivot's second hop translates the first hop's best translations, its
word links composed with the first hop's (source word -> pivot word -> target word), and the request's
options (beam, n-best, alternatives) apply to the last hop. Every hop's job is batched with other
requests' sentences for the same model, as any other.
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from dataclasses import dataclass, field

from starlette.requests import Request

from mt.document.formats import Document
from mt.serve.documents import Planned, plan
from mt.serve.engine import Options, Output
from mt.serve.front import Front
from mt.serve.limits import check_sentence_count
from mt.serve.models import ModelSet, ServedModel
from mt.serve.problems import bad_request
from mt.serve.routing import NoRoute, Route

DETECT_CHARS = 2000  # a document's first characters are enough to tell its language


@dataclass
class Group:
    """The documents of a request (at ``indices``) that take one route, their plan, and, once translated,
    one output per sentence (the last hop's, links composed through the hops)."""

    route: Route
    indices: list[int]
    planned: Planned | None
    models: ModelSet  # the set it was routed over: a reload meanwhile does not pull its models away
    outputs: list[Output] = field(default_factory=list)

    @property
    def last_model(self) -> ServedModel:
        """The model of the route's last hop (whose settings the request's options apply to)."""
        return self.models[self.route.hops[-1].model]


def document_text(document: Document) -> str:
    """What language identification reads of a document: its units' text, up to ``DETECT_CHARS``."""
    text = "\n".join(unit.text for unit in document.units)
    return text[:DETECT_CHARS]


async def detect_sources(service: Front, documents: Sequence[Document]) -> list[tuple[str, float]]:
    """Each document's (language, confidence in %) among the languages the models read; no detection
    where only one is read (it is then the answer, at 100)."""
    sources = service.models.router.sources()
    if len(sources) == 1:
        return [(sources[0], 100.0)] * len(documents)
    identifier = language_identifier(service)
    texts = [document_text(d) for d in documents]
    # one text after another on one core: lingua's batch call would take every core from the decoding worker
    found = await asyncio.to_thread(lambda: [identifier.detect(text) for text in texts])
    return [ranked[0] for ranked in found]


def language_identifier(service: Front):
    """The identifier over the models' source languages that it knows (built on first use, again after a
    reload; a model with language codes reads them under LibreTranslate's codes, ``mt.serve.language_codes``);
    400 when it knows none of them (a request must then name its source)."""
    if service.identifier is None:
        from mt.document.language import LANGUAGES, LanguageIdentifier

        sources = service.models.router.sources()
        known = [code for code in sources if code in LANGUAGES]
        if not known:
            raise bad_request(f"language detection knows none of the source languages served ({', '.join(sources)}): "
                              "name the source")
        service.identifier = LanguageIdentifier(known)
    return service.identifier


def route_of(models: ModelSet, source: str, target: str, model: str | None = None) -> Route:
    """The route of ``source -> target`` over ``models`` (either named by a model's own code too, NLLB's
    ``deu_Latn``: ``Router.served``); LibreTranslate's 400 naming what is served when there is none."""
    router = models.router
    source, target = router.served(source), router.served(target)
    if model is None and source not in router.sources():
        raise bad_request(f"{source} is not supported ({router.describe()})")
    if model is None and target not in router.targets_of(source):
        raise bad_request(f"{target} is not supported ({router.describe()})")
    try:
        return router.route(source, target, model)
    except NoRoute as e:
        raise bad_request(str(e)) from None


async def route_documents(
    service: Front, documents: Sequence[Document], sources: Sequence[str], target: str, model: str | None = None
) -> list[Group]:
    """The documents grouped by route, each group planned by its first model (400 for more sentences in
    all than ``--max-lines``)."""
    models = service.models
    groups = []
    for route, indices in routes(models, sources, target, model).items():
        first = route.first
        engine = await service.engine(models[first.model])
        planned = plan([documents[i] for i in indices], first.source, engine, first.tag)
        groups.append(Group(route, indices, planned, models))
    check_sentence_count(sum(len(g.planned.sentences) for g in groups), service.settings.max_lines)
    return groups


def routes(models: ModelSet, sources: Sequence[str], target: str, model: str | None) -> dict[Route, list[int]]:
    """Each route and the indices of the texts (in ``sources``' languages) that take it."""
    by_route: dict[Route, list[int]] = {}
    for i, source in enumerate(sources):
        by_route.setdefault(route_of(models, source, target, model), []).append(i)
    return by_route


async def translate_groups(service: Front, request: Request, groups: Sequence[Group], options: Options) -> None:
    """Translate every group's sentences along its route (sets ``Group.outputs``); groups run concurrently."""

    async def run(group: Group) -> None:
        planned = group.planned
        group.outputs = await translate_lines(service, request, group, planned.sentences, options,
                                              planned.needs_alignment)

    await asyncio.gather(*(run(g) for g in groups))


async def translate_lines(
    service: Front, request: Request, group: Group, lines: Sequence[str], options: Options,
    align: Sequence[bool] | None = None,
) -> list[Output]:
    """``lines`` through the hops of ``group``'s route (``options`` for the last), one output per line."""
    outputs: list[Output] | None = None
    hops = group.route.hops
    for k, hop in enumerate(hops):
        last = k == len(hops) - 1
        found = await service.translate(request, group.models[hop.model], lines, options if last else Options(),
                                        hop.tag, align, hop.source_code)
        outputs = found if outputs is None else [compose(a, b) for a, b in zip(outputs, found, strict=True)]
        lines = [o.text for o in found]
    return outputs or []


def compose(first: Output, second: Output) -> Output:
    """A pivot's output: the second hop's translations and scores, the first hop's source tokens, and word
    links through the pivot (source word s -> target word t where s -> p and p -> t for some pivot word p)."""
    links = None
    if first.links is not None and second.links is not None:
        onward: dict[int, list[int]] = {}
        for p, t in second.links:
            onward.setdefault(p, []).append(t)
        links = sorted({(s, t) for s, p in first.links for t in onward.get(p, [])})
    return Output(second.texts, second.scores, first.src_tokens, second.tgt_tokens, links)


def in_request_order(groups: Sequence[Group], per_group: Sequence[Sequence]) -> list:
    """Per-document values of each group (``per_group[g][k]`` for ``groups[g].indices[k]``) in request order."""
    out: dict[int, object] = {}
    for group, values in zip(groups, per_group, strict=True):
        out.update(zip(group.indices, values, strict=True))
    return [out[i] for i in range(len(out))]


def models_used(groups: Sequence[Group]) -> list[str]:
    return list(dict.fromkeys(name for g in groups for name in g.route.models))
