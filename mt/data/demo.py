"""The embedded offline corpus: English number words -> German (or French, Czech) number words, by ``num2words``.

``21 -> "twenty-one" / "einundzwanzig"``. A line lists 1 to ``max_numbers_per_line`` numbers separated
by "; " (``"twenty-one; four hundred and five" -> "einundzwanzig; vierhundertfünf"``): a German number is
one fused word, so single-number lines would have no word n-grams and BLEU could not measure them.
Numbers are drawn without replacement from ``[min_number, max_number]`` by ``random.Random(seed)`` (never
the global RNG), so the corpus is identical across runs for one seed and the train / valid / test splits
are disjoint by number. The corpus is written as parallel files (``{train,valid,test}.{en,de}``, and
``.fr`` / ``.cs`` for a run that asks for them: the same numbers in every language) and read through the
same path as real data.
"""

from __future__ import annotations

import os
import random
import tempfile
from pathlib import Path

from num2words import num2words

from mt.config import DemoConfig
from mt.data.errors import DataError
from mt.data.sources import fingerprint

_DEMO_VERSION = 3  # bump when the generation recipe changes
SEPARATOR = "; "
DEMO_TARGETS = ("de", "fr", "cs")  # the languages besides English (num2words has them all)


def demo_numbers(cfg: DemoConfig) -> dict[str, list[tuple[int, ...]]]:
    """The numbers of each line of each split, disjoint across splits, deterministic in ``cfg.seed``."""
    sizes = {"train": cfg.train_size, "valid": cfg.valid_size, "test": cfg.test_size}
    if min(sizes.values()) <= 0:
        raise DataError(f"demo split sizes must be positive, got {sizes}")
    if cfg.max_numbers_per_line < 1:
        raise DataError(f"demo max_numbers_per_line must be >= 1, got {cfg.max_numbers_per_line}")
    population = range(cfg.min_number, cfg.max_number + 1)
    total = sum(sizes.values()) * cfg.max_numbers_per_line  # enough for the longest lines
    if total > len(population):
        raise DataError(
            f"demo corpus needs {total} distinct numbers but [{cfg.min_number}, {cfg.max_number}] "
            f"holds only {len(population)}"
        )
    rng = random.Random(cfg.seed)
    drawn = _draw_by_magnitude(rng, cfg.min_number, cfg.max_number, total)
    out, start = {}, 0
    for split, size in sizes.items():
        lines = []
        for _ in range(size):
            count = rng.randint(1, cfg.max_numbers_per_line)
            lines.append(tuple(drawn[start : start + count]))
            start += count
        out[split] = lines
    return out


def _draw_by_magnitude(rng: random.Random, lo: int, hi: int, count: int) -> list[int]:
    """``count`` distinct numbers from [lo, hi], each digit count about equally likely.

    Uniform draws from [0, 999999] would be 90% six-digit numbers and almost never "twenty-one";
    drawing the number of digits first makes small numbers as common as large ones until a
    magnitude runs out (there are only 10 one-digit numbers).
    """
    bands = []  # [first, last] of each digit count, clipped to [lo, hi]
    for digits in range(1, len(str(hi)) + 1):
        first, last = max(lo, 0 if digits == 1 else 10 ** (digits - 1)), min(hi, 10**digits - 1)
        if first <= last:
            bands.append([first, last])
    used: set[int] = set()
    left = {i: band[1] - band[0] + 1 for i, band in enumerate(bands)}
    drawn: list[int] = []
    while len(drawn) < count:
        band = rng.choice([i for i, n in left.items() if n > 0])
        number = rng.randint(*bands[band])
        if number not in used:
            used.add(number)
            drawn.append(number)
            left[band] -= 1
    return drawn


def demo_pair(n: int, lang: str = "de") -> tuple[str, str]:
    """``(english, <lang>)`` number words for ``n`` (German by default)."""
    return num2words(n, lang="en"), num2words(n, lang=lang)


def demo_line(numbers: tuple[int, ...], lang: str = "de") -> tuple[str, str]:
    """``(english, <lang>)`` for a line listing ``numbers`` (German by default)."""
    return demo_words(numbers, "en"), demo_words(numbers, lang)


def demo_words(numbers: tuple[int, ...], lang: str) -> str:
    """A line listing ``numbers`` as ``lang`` number words."""
    return SEPARATOR.join(num2words(n, lang=lang) for n in numbers)


def write_demo_corpus(cfg: DemoConfig, root: Path, languages: tuple[str, ...] = ("en", "de")) -> Path:
    """Write the corpus's ``languages`` under ``root/<fingerprint>/`` (each file once, atomically); the directory.

    Every language's files hold the same numbers line by line, so any two of them are a parallel corpus.
    """
    unknown = sorted(set(languages) - {"en", *DEMO_TARGETS})
    if unknown:
        raise DataError(f"the demo corpus has no language {', '.join(unknown)}; it has en, {', '.join(DEMO_TARGETS)}")
    out = Path(root) / fingerprint(
        _DEMO_VERSION, cfg.train_size, cfg.valid_size, cfg.test_size, cfg.min_number, cfg.max_number,
        cfg.max_numbers_per_line, cfg.seed,
    )
    missing = [lang for lang in dict.fromkeys(languages) if not _has_language(out, lang)]
    if not missing:
        return out
    out.mkdir(parents=True, exist_ok=True)
    for split, lines in demo_numbers(cfg).items():
        for lang in missing:
            _write_atomic(out / f"{split}.{lang}", "".join(demo_words(numbers, lang) + "\n" for numbers in lines))
    return out


def _has_language(out: Path, lang: str) -> bool:
    return all((out / f"{split}.{lang}").is_file() for split in ("train", "valid", "test"))


def _write_atomic(path: Path, text: str) -> None:
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.")
    with os.fdopen(fd, "w", encoding="utf-8") as f:
        f.write(text)
    os.replace(tmp, path)
