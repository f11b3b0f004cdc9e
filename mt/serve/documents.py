"""A request's texts as documents: their sentences go to the worker, their translations come back in shape.

``/translate``'s ``q`` items (``format=text``: plain text, every line break and blank line kept;
``format=html``: markup kept, ``mt.document.formats.html``) and ``/translate_file``'s file are documents
(``mt.document``): ``plan`` cuts their units into sentences under the model's limit, the sentences of every
document of the request go to the worker as one job (batched with other requests' sentences), the ones an
inline element touches with their word alignment, and ``Planned.finish`` assembles each document from its
translated sentences. Alternatives (``Planned.alternatives``) join each sentence's k-th hypothesis.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from mt.document.formats import Document
from mt.document.plan import Plan, Translated, plan_units
from mt.serve.engine import Engine, Output


@dataclass
class Planned:
    """Documents and the plan of each (their sentences, in order, are ``sentences``)."""

    documents: list[Document]
    plans: list[Plan]

    @property
    def sentences(self) -> list[str]:
        return [s for plan in self.plans for s in plan.sentences]

    @property
    def needs_alignment(self) -> list[bool]:
        return [a for plan in self.plans for a in plan.needs_alignment]

    def finish(self, outputs: Sequence[Output]) -> list[bytes]:
        """Each document written back from its sentences' outputs (in ``sentences`` order)."""
        return [doc.write(plan.assemble(part)) for doc, plan, part in self._parts(outputs, best)]

    def alternatives(self, outputs: Sequence[Output], count: int, best: Sequence[bytes]) -> list[list[bytes]]:
        """Per document, up to ``count`` distinct alternatives to its best translation ``best`` (``finish``'s):
        the k-th has each sentence's k-th hypothesis (its best where it has fewer)."""
        found: list[list[bytes]] = [[] for _ in self.documents]
        for k in range(1, count + 1):
            written = [doc.write(plan.assemble(part)) for doc, plan, part in self._parts(outputs, kth(k))]
            for seen, text in zip(found, written, strict=True):
                seen.append(text)
        return [list(dict.fromkeys(t for t in alts if t != main)) for alts, main in zip(found, best, strict=True)]

    def _parts(self, outputs: Sequence[Output], choose):
        at = 0
        for doc, plan in zip(self.documents, self.plans, strict=True):
            n = len(plan.sentences)
            yield doc, plan, [choose(o) for o in outputs[at : at + n]]
            at += n


def best(output: Output) -> Translated:
    return Translated(output.text, output.links)


def kth(k: int):
    def choose(output: Output) -> Translated:
        return Translated(output.texts[k] if k < len(output.texts) else output.text)  # no links: text only
    return choose


def plan(documents: Sequence[Document], language: str, engine: Engine, target: str | None) -> Planned:
    """The sentences of ``documents`` in ``language``, each within the engine's source limit (with ``target``'s
    tag counted)."""
    def count(text: str) -> int:
        return engine.count_pieces(text, target)

    plans = [plan_units(doc.units, language, doc.hard_breaks, count, engine.max_src_len) for doc in documents]
    return Planned(list(documents), plans)
