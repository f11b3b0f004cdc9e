"""Which of the server's languages a text is written in: lingua, restricted to the languages the models read.

``LanguageIdentifier(["en", "de", "fr", "cs"]).detect(text)`` answers every one of those languages with
its confidence in percent (lingua's confidence values, which sum to 1 over the restricted languages, times
100 and rounded to 2 decimals), best first; equal confidences (after rounding) keep the given order. Text
lingua cannot place (no letters at all: empty, digits, punctuation; or only letters of a script none of
the languages is written in) gets 0.0 for every language, so the first given language comes first. With
one language the answer is always that language, at 100.0, or at 0.0 where lingua finds the text unlike it.

lingua's models ship in its wheel (nothing is downloaded) and are loaded when the identifier is built, so
the first request is as fast as the others. docs/language-detection.md compares lingua with py3langid.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

from lingua import ConfidenceValue, Language, LanguageDetectorBuilder

from mt.document.errors import DocumentError

LANGUAGES: dict[str, Language] = {language.iso_code_639_1.name.lower(): language for language in Language.all()}
Ranking = list[tuple[str, float]]  # (ISO 639-1 code, confidence in percent), best first


class LanguageIdentifier:
    """lingua restricted to ``languages`` (ISO 639-1 codes, one or more), its models loaded up front.

    Thread-safe: lingua's detector is read-only once built (its models are loaded here), so calls may come
    from any thread, an event loop's included. lingua keeps the GIL while it computes, so calls take turns
    and one blocks the event loop for its length (about 0.2 ms a caption, 0.15 s for 200,000 characters).
    ``low_accuracy`` is lingua's trigram-only mode (less memory, worse on short texts).
    """

    def __init__(self, languages: Sequence[str], *, low_accuracy: bool = False) -> None:
        self.languages: list[str] = list(languages)
        builder = LanguageDetectorBuilder.from_languages(*_lingua_languages(self.languages))
        if low_accuracy:
            builder = builder.with_low_accuracy_mode()
        self._detector = builder.with_preloaded_language_models().build()
        self._order = {code: index for index, code in enumerate(self.languages)}

    def detect(self, text: str) -> Ranking:
        """Every language with its confidence in percent (0..100), best first, ties in the given order."""
        if not _has_letters(text):
            return self._unplaced()
        return self._ranked(self._detector.compute_language_confidence_values(text))

    def detect_many(self, texts: Iterable[str]) -> list[Ranking]:
        """``detect`` of each text, computed by lingua on all cores at once (the same answers, faster)."""
        texts = list(texts)
        placeable = [index for index, text in enumerate(texts) if _has_letters(text)]
        values = self._detector.compute_language_confidence_values_in_parallel([texts[i] for i in placeable])
        rankings = [self._unplaced() for _ in texts]
        for index, confidences in zip(placeable, values, strict=True):
            rankings[index] = self._ranked(confidences)
        return rankings

    def _ranked(self, confidences: list[ConfidenceValue]) -> Ranking:
        """lingua's values as rounded percentages, sorted by confidence, then by the given order."""
        percent = {c.language.iso_code_639_1.name.lower(): round(c.value * 100, 2) for c in confidences}
        return sorted(((code, percent[code]) for code in self.languages), key=lambda p: (-p[1], self._order[p[0]]))

    def _unplaced(self) -> Ranking:
        return [(code, 0.0) for code in self.languages]


def _lingua_languages(codes: Sequence[str]) -> list[Language]:
    """lingua's ``Language`` of each code; an unknown, repeated or missing code is refused by name."""
    if not codes:
        raise DocumentError("language detection needs at least one language")
    unknown = [code for code in codes if code not in LANGUAGES]
    if unknown:
        known = " ".join(sorted(LANGUAGES))
        raise DocumentError(f"language detection does not know {', '.join(map(repr, unknown))}; it knows: {known}")
    repeated = sorted({code for code in codes if codes.count(code) > 1})
    if repeated:
        raise DocumentError(f"language detection got {', '.join(map(repr, repeated))} more than once")
    return [LANGUAGES[code] for code in codes]


def _has_letters(text: str) -> bool:
    return any(char.isalpha() for char in text)
