"""mt-translate's documents: a file read by its format, its sentences translated, the file written back.

The sentences of the whole document are translated in one ``Translator`` call (sorted and batched by
length across paragraphs), the ones an inline element touches are aligned (``Translator.align``) so the
element lands on the right words, and the format writes the file back (``mt.document``).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

from mt.document.formats import Document
from mt.document.plan import Plan, Translated, plan_units

if TYPE_CHECKING:
    from mt.decode import Translator


def plan_document(translator: Translator, units_doc: Document, language: str, target: str | None,
                  split: bool = True) -> Plan:
    """The document's sentences, each within the model's source limit (a target tag counted)."""
    tag = len(translator.target_tag(target))

    def count(text: str) -> int:
        return tag + len(translator.tokenizers.src.encode(text))

    return plan_units(units_doc.units, language, units_doc.hard_breaks, count, translator.max_src_len, split)


def translate_plan(translator: Translator, plan: Plan, target: str | None, progress: bool = False,
                   ) -> list[Translated]:
    """Every sentence of ``plan`` translated, with word links where an inline element needs them."""
    sentences = plan.sentences
    translations = translator.translate_nbest(sentences, progress=progress, target_lang=target, scores=False)
    wanted = [i for i, needed in enumerate(plan.needs_alignment) if needed]
    links: dict[int, Sequence[tuple[int, int]]] = {}
    if wanted:
        found = translator.align([sentences[i] for i in wanted], [translations[i] for i in wanted], target)
        links = dict(zip(wanted, found, strict=True))
    return [Translated(t.text, links.get(i)) for i, t in enumerate(translations)]


def translate_document(translator: Translator, document: Document, language: str, target: str | None,
                       progress: bool = False, split: bool = True) -> bytes:
    """``document`` translated and written back in its format."""
    plan = plan_document(translator, document, language, target, split)
    return document.write(plan.assemble(translate_plan(translator, plan, target, progress)))
