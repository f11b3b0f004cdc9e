"""LibreTranslate's language codes for models that name their languages otherwise (NLLB-200).

LibreTranslate's clients name a language by its ISO 639-1 code (``en``, ``de``; ``zt``: Chinese in the traditional
script). NLLB-200 names its languages by FLORES-200 codes, the ISO 639-3 code and the script (``eng_Latn``,
``deu_Latn``, ``zho_Hant``); M2M-100's codes (its ``__en__`` tokens) are ISO 639-1 already. ``LIBRETRANSLATE``
pairs every language LibreTranslate offers with its FLORES-200 code in NLLB-200 (where NLLB-200 has several
varieties, the standard one: Modern Standard Arabic ``arb_Arab``, Western Persian ``pes_Arab``, Standard Latvian
``lvs_Latn``). mt-serve shows and routes a model's languages under the codes ``served_codes`` gives (LibreTranslate's,
else the model's own), accepts the model's own codes too (``mt.serve.routing.Router.served``), and hands the model
its own code of each request's languages (``mt.serve.routing.Languages.codes``). ``source=auto`` reads the served
codes (lingua knows ISO 639-1 codes, ``mt.document.language``).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence

from mt.errors import UserError
from mt.serve.routing import Languages

# LibreTranslate's code -> (the language's FLORES-200 code in NLLB-200, its English name)
LIBRETRANSLATE: dict[str, tuple[str, str]] = {
    "ar": ("arb_Arab", "Arabic"),
    "az": ("azj_Latn", "Azerbaijani"),
    "bg": ("bul_Cyrl", "Bulgarian"),
    "bn": ("ben_Beng", "Bengali"),
    "ca": ("cat_Latn", "Catalan"),
    "cs": ("ces_Latn", "Czech"),
    "da": ("dan_Latn", "Danish"),
    "de": ("deu_Latn", "German"),
    "el": ("ell_Grek", "Greek"),
    "en": ("eng_Latn", "English"),
    "eo": ("epo_Latn", "Esperanto"),
    "es": ("spa_Latn", "Spanish"),
    "et": ("est_Latn", "Estonian"),
    "eu": ("eus_Latn", "Basque"),
    "fa": ("pes_Arab", "Persian"),
    "fi": ("fin_Latn", "Finnish"),
    "fr": ("fra_Latn", "French"),
    "ga": ("gle_Latn", "Irish"),
    "gl": ("glg_Latn", "Galician"),
    "he": ("heb_Hebr", "Hebrew"),
    "hi": ("hin_Deva", "Hindi"),
    "hu": ("hun_Latn", "Hungarian"),
    "id": ("ind_Latn", "Indonesian"),
    "it": ("ita_Latn", "Italian"),
    "ja": ("jpn_Jpan", "Japanese"),
    "ko": ("kor_Hang", "Korean"),
    "lt": ("lit_Latn", "Lithuanian"),
    "lv": ("lvs_Latn", "Latvian"),
    "ms": ("zsm_Latn", "Malay"),
    "nb": ("nob_Latn", "Norwegian Bokmål"),
    "nl": ("nld_Latn", "Dutch"),
    "pl": ("pol_Latn", "Polish"),
    "pt": ("por_Latn", "Portuguese"),
    "ro": ("ron_Latn", "Romanian"),
    "ru": ("rus_Cyrl", "Russian"),
    "sk": ("slk_Latn", "Slovak"),
    "sl": ("slv_Latn", "Slovenian"),
    "sq": ("als_Latn", "Albanian"),
    "sv": ("swe_Latn", "Swedish"),
    "th": ("tha_Thai", "Thai"),
    "tl": ("tgl_Latn", "Tagalog"),
    "tr": ("tur_Latn", "Turkish"),
    "uk": ("ukr_Cyrl", "Ukrainian"),
    "ur": ("urd_Arab", "Urdu"),
    "vi": ("vie_Latn", "Vietnamese"),
    "zh": ("zho_Hans", "Chinese"),
    "zt": ("zho_Hant", "Chinese (traditional)"),
}
FROM_FLORES_200 = {flores: code for code, (flores, _) in LIBRETRANSLATE.items()}
NAMES = {code: name for code, (_, name) in LIBRETRANSLATE.items()}


def served_code(code: str) -> str:
    """The code a model's language ``code`` is served under: LibreTranslate's (``deu_Latn`` -> ``de``), else
    ``code`` itself (M2M-100's ``de``, NLLB's ``ace_Arab``)."""
    return FROM_FLORES_200.get(code, code)


def served_codes(codes: Sequence[str]) -> dict[str, str]:
    """Each of a model's language ``codes`` -> the code it is served under (``served_code``); a code that two of
    its languages would share is left to neither (each keeps its own)."""
    served = {code: served_code(code) for code in codes}
    count = Counter(served.values())
    return {code: name if count[name] == 1 else code for code, name in served.items()}


def coded_languages(name: str, sources: Sequence[str], targets: Sequence[str], source: str | None = None
                    ) -> Languages:
    """What a model with language codes (M2M-100, NLLB) serves: every one of its ``sources`` into its ``targets``
    (its own codes), under the served codes; ``source`` (either code) first, the default (else its first)."""
    served = served_codes(list(dict.fromkeys([*sources, *targets])))
    read = [served[code] for code in sources]
    first = served.get(source, source) if source is not None else read[0]
    if first not in read:
        raise UserError(f"source language {source!r} is not one of this model's: {', '.join(read)}")
    codes = tuple((shown, own) for own, shown in served.items() if shown != own)
    return Languages(name, first, tuple(served[code] for code in targets), tagged=True,
                     sources=(first, *(lang for lang in read if lang != first)), codes=codes)
