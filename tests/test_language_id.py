"""Language identification (mt.document.language): restricted, ranked, the no-letters rule, real captions."""

from __future__ import annotations

import gzip
from concurrent.futures import ThreadPoolExecutor

import pytest

from mt.document.errors import DocumentError
from mt.document.language import LanguageIdentifier

LANGUAGES = ["en", "de", "fr", "cs"]
GERMAN = "Zwei junge weiße Männer sind im Freien in der Nähe vieler Büsche."


@pytest.fixture(scope="module")
def identifier() -> LanguageIdentifier:
    return LanguageIdentifier(LANGUAGES)


@pytest.fixture(scope="module")
def captions(multi30k_dir) -> dict[str, list[str]]:
    """The first 20 test2016 captions of each language."""
    out = {}
    for code in LANGUAGES:
        with gzip.open(multi30k_dir / f"test_2016_flickr.{code}.gz", "rt", encoding="utf-8") as f:
            out[code] = [next(f).strip() for _ in range(20)]
    return out


def test_a_language_left_out_is_never_answered():
    ranking = LanguageIdentifier(["en", "fr"]).detect(GERMAN)
    assert [code for code, _ in ranking] in (["en", "fr"], ["fr", "en"])


def test_every_language_once_best_first_in_percent(identifier):
    ranking = identifier.detect(GERMAN)
    assert sorted(code for code, _ in ranking) == sorted(LANGUAGES)
    assert ranking[0][0] == "de"
    confidences = [confidence for _, confidence in ranking]
    assert confidences == sorted(confidences, reverse=True)
    assert all(0.0 <= c <= 100.0 and c == round(c, 2) for c in confidences)
    assert sum(confidences) == pytest.approx(100.0, abs=0.05)  # lingua's values sum to 1, each rounded


@pytest.mark.parametrize("text", ["", "   \n", "1234 56", "?!… — ()", "😀 ✓"])
def test_text_without_letters_answers_the_given_order_at_zero(text):
    identifier = LanguageIdentifier(["fr", "en"])
    assert identifier.detect(text) == [("fr", 0.0), ("en", 0.0)]
    assert identifier.detect_many([text]) == [[("fr", 0.0), ("en", 0.0)]]


def test_letters_of_a_script_no_language_uses_tie_in_the_given_order(identifier):
    assert identifier.detect("你好世界") == [(code, 0.0) for code in LANGUAGES]


def test_an_unknown_code_is_refused_by_name_with_the_known_ones():
    with pytest.raises(DocumentError, match=r"does not know 'xx'; it knows: af ar .* de .* en .*zu$"):
        LanguageIdentifier(["en", "xx"])


@pytest.mark.parametrize(("codes", "message"), [([], "at least one language"), (["en", "de", "en"], "'en' more")])
def test_no_languages_or_a_repeated_one_is_refused(codes, message):
    with pytest.raises(DocumentError, match=message):
        LanguageIdentifier(codes)


def test_a_single_language_is_always_the_answer():
    identifier = LanguageIdentifier(["de"])
    assert identifier.languages == ["de"]
    assert identifier.detect(GERMAN) == [("de", 100.0)]
    assert identifier.detect("A dog runs through the grass.") == [("de", 0.0)]  # lingua: unlike German
    assert identifier.detect("42") == [("de", 0.0)]


def test_languages_keep_the_given_order():
    assert LanguageIdentifier(["cs", "en"]).languages == ["cs", "en"]


def test_detect_many_equals_detect_item_by_item(identifier, captions):
    texts = [t for code in LANGUAGES for t in captions[code]] + ["", "123", "Hund", "你好"]
    assert identifier.detect_many(texts) == [identifier.detect(t) for t in texts]
    assert identifier.detect_many([]) == []


def test_calls_from_several_threads_answer_as_one_thread(identifier, captions):
    texts = [t for code in LANGUAGES for t in captions[code]]
    with ThreadPoolExecutor(4) as pool:
        assert list(pool.map(identifier.detect, texts)) == [identifier.detect(t) for t in texts]


def test_real_captions_are_identified(identifier, captions):
    # measured: 20/20 captions of each language; their last 3 words: 20, 20, 19 (fr), 20
    for code in LANGUAGES:
        whole = [ranking[0][0] for ranking in identifier.detect_many(captions[code])]
        last_words = [" ".join(t.split()[-3:]) for t in captions[code]]
        short = [ranking[0][0] for ranking in identifier.detect_many(last_words)]
        assert whole.count(code) >= 19, (code, whole)
        assert short.count(code) >= 17, (code, short)
