"""Language identification for mt-serve (``POST /detect``, ``source=auto``), measured on Multi30k captions.

    python scripts/eval_language_id.py --data ../shared/data/multi30k    (or MT_MULTI30K=DIR)
    python scripts/eval_language_id.py --data DIR --candidates lingua,py3langid --rounds 5

Each candidate is restricted to en, de, fr, cs (the languages of Multi30k, all four in each set read:
``test_2016_flickr`` and ``val``) and answers the best language of every sentence. Accuracy per language:
the fraction of that language's sentences it answers right. Short texts, where identifiers differ: from
each sentence ``N`` consecutive words at a seeded random place (``--words``, the whole sentence when it is
shorter), accuracy over all four languages. Cost: the wall time of one call per sentence, and of one
batch call (``detect_many``) over all, per sentence, the median of ``--rounds`` rounds that alternate the
candidates (so a busy moment of the machine does not land on one of them).
Memory: the growth of the resident set while building the candidate (import excluded), in each of 3 fresh
processes (lowest-highest; lingua's varies from run to run), and the median time to build.

Candidates: ``lingua`` (mt.document.language.LanguageIdentifier, lingua's default high-accuracy mode),
``lingua-low`` (the same, lingua's low-accuracy mode: trigrams only), ``py3langid`` (``set_languages``).
"""

from __future__ import annotations

import argparse
import gzip
import multiprocessing
import os
import random
import resource
import statistics
import time
from collections.abc import Callable
from pathlib import Path

import py3langid.langid

from mt.document.language import LanguageIdentifier

LANGUAGES = ["en", "de", "fr", "cs"]
SETS = ["test_2016_flickr", "val"]
CANDIDATES = ["lingua", "lingua-low", "py3langid"]


class Py3langid:
    """py3langid restricted to ``languages``, answering like LanguageIdentifier; ``detect_many`` is a loop."""

    def __init__(self, languages: list[str]) -> None:
        langid = py3langid.langid
        self._identifier = langid.LanguageIdentifier.from_model_file(langid.MODEL_FILE, norm_probs=True)
        self._identifier.set_languages(languages)

    def detect(self, text: str) -> list[tuple[str, float]]:
        return [(code, round(p * 100, 2)) for code, p in self._identifier.rank(text)]

    def detect_many(self, texts: list[str]) -> list[list[tuple[str, float]]]:
        return [self.detect(text) for text in texts]


def build(name: str) -> LanguageIdentifier | Py3langid:
    """The candidate ``name`` restricted to LANGUAGES."""
    low = name == "lingua-low"
    return Py3langid(LANGUAGES) if name == "py3langid" else LanguageIdentifier(LANGUAGES, low_accuracy=low)


def rss_mib() -> float:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * resource.getpagesize() / 2**20


def build_cost(name: str) -> tuple[float, float]:
    """(MiB the resident set grows by while building ``name``, seconds it takes), imports not counted."""
    before, start = rss_mib(), time.perf_counter()
    candidate = build(name)
    seconds, grown = time.perf_counter() - start, rss_mib() - before
    del candidate  # only now: built and still held when the resident set was read
    return grown, seconds


def build_costs(name: str, times: int = 3) -> list[tuple[float, float]]:
    """``build_cost`` in ``times`` fresh processes, so no candidate built earlier lends it memory."""
    with multiprocessing.get_context("spawn").Pool(1, maxtasksperchild=1) as pool:  # a new process each time
        return [pool.apply(build_cost, (name,)) for _ in range(times)]


def read(path: Path) -> list[str]:
    with gzip.open(path, "rt", encoding="utf-8") as f:
        return [line.strip() for line in f]


def load(data: Path, sets: list[str]) -> dict[str, list[str]]:
    """The sentences of each language, all sets in order."""
    return {code: [s for name in sets for s in read(data / f"{name}.{code}.gz")] for code in LANGUAGES}


def windows(sentences: dict[str, list[str]], words: int, seed: int = 0) -> dict[str, list[str]]:
    """``words`` consecutive words of each sentence, starting at a seeded random word."""
    rng, out = random.Random(seed), {}
    for code, texts in sentences.items():
        split = [text.split() for text in texts]
        starts = [rng.randrange(max(1, len(w) - words + 1)) for w in split]
        out[code] = [" ".join(w[start : start + words]) for w, start in zip(split, starts, strict=True)]
    return out


def accuracy(candidate, sentences: dict[str, list[str]]) -> dict[str, float]:
    """The fraction of each language's sentences whose best language is that language."""
    best = {code: [ranking[0][0] for ranking in candidate.detect_many(sentences[code])] for code in LANGUAGES}
    return {code: statistics.mean(answer == code for answer in best[code]) for code in LANGUAGES}


def timed(call: Callable[[], list], count: int) -> tuple[list, float]:
    """``call()``'s answers and its wall time per item in ms."""
    start, answers = time.perf_counter(), call()
    return answers, (time.perf_counter() - start) * 1000 / count


def cost(candidate, texts: list[str]) -> tuple[float, float]:
    """(ms per sentence one call each, ms per sentence in one batch call); the two must answer the same."""
    single, single_ms = timed(lambda: [candidate.detect(t) for t in texts], len(texts))
    batch, batch_ms = timed(lambda: candidate.detect_many(texts), len(texts))
    if batch != single:
        raise AssertionError("detect_many differs from detect")
    return single_ms, batch_ms


def percent(fraction: float) -> str:
    return f"{100 * fraction:.2f}%"


def accuracy_table(results: dict[str, dict], counts: dict[str, int], words: list[int]) -> str:
    head = [f"{code} ({counts[code]})" for code in LANGUAGES] + ["all"] + [f"{n} words" for n in words]
    lines = ["| candidate | " + " | ".join(head) + " |", "| --- |" + " ---: |" * len(head)]
    for name, r in results.items():
        cells = [percent(r["accuracy"][code]) for code in LANGUAGES] + [percent(mean(r["accuracy"]))]
        cells += [percent(mean(r[n])) for n in words]
        lines.append(f"| {name} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def cost_table(results: dict[str, dict]) -> str:
    lines = [
        "| candidate | ms/sentence, one call each | ms/sentence, detect_many | MiB to build (3 runs) | s to build |",
        "| --- | ---: | ---: | ---: | ---: |",
    ]
    for name, r in results.items():
        mib = f"{min(r['mib']):.0f}-{max(r['mib']):.0f}"
        lines.append(f"| {name} | {r['single']:.3f} | {r['batch']:.3f} | {mib} | {r['build_s']:.2f} |")
    return "\n".join(lines)


def mean(per_language: dict[str, float]) -> float:
    """Over the four languages (each has as many sentences)."""
    return statistics.mean(per_language[code] for code in LANGUAGES)


def parse_args() -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    env = os.environ.get("MT_MULTI30K")
    data = Path(env) if env else None
    p.add_argument("--data", type=Path, default=data, required=data is None, help="Multi30k (default: $MT_MULTI30K)")
    p.add_argument("--candidates", default=",".join(CANDIDATES), help=f"comma-separated, of {','.join(CANDIDATES)}")
    p.add_argument("--sets", default=",".join(SETS), help="Multi30k sets with all four languages")
    p.add_argument("--words", default="1,2,3,4", help="short-text lengths, in words")
    p.add_argument("--rounds", type=int, default=3, help="timing rounds, alternating the candidates")
    args = p.parse_args()
    args.candidates = args.candidates.split(",")
    args.words = [int(n) for n in args.words.split(",")]
    unknown = set(args.candidates) - set(CANDIDATES)
    if unknown:
        p.error(f"unknown candidates {sorted(unknown)}; choose from {CANDIDATES}")
    return args


def main() -> None:
    args = parse_args()
    sentences = load(args.data, args.sets.split(","))
    short = {n: windows(sentences, n) for n in args.words}
    results: dict[str, dict] = {}
    for name in args.candidates:
        mib, build_s = zip(*build_costs(name), strict=True)
        results[name] = {"mib": mib, "build_s": build_s, "single": [], "batch": []}
    candidates = {name: build(name) for name in args.candidates}
    for name, candidate in candidates.items():
        results[name]["accuracy"] = accuracy(candidate, sentences)
        results[name].update({n: accuracy(candidate, texts) for n, texts in short.items()})
    texts = [s for code in LANGUAGES for s in sentences[code]]
    for _ in range(args.rounds):
        for name, candidate in candidates.items():
            single, batch = cost(candidate, texts)
            results[name]["single"].append(single)
            results[name]["batch"].append(batch)
    for r in results.values():
        r.update({key: statistics.median(r[key]) for key in ("single", "batch", "build_s")})
    print(f"sets: {args.sets}; {os.cpu_count()} CPUs; cost: median of {args.rounds} rounds\n")
    print(accuracy_table(results, {code: len(s) for code, s in sentences.items()}, args.words), end="\n\n")
    print(cost_table(results))


if __name__ == "__main__":
    main()
