"""Quality of documents, measured: paragraphs with and without sentence splitting, and tag placement.

    python scripts/eval_documents.py paragraphs --ckpt runs/multi30k_en_de/.../best.pt
    python scripts/eval_documents.py tags --ckpt ... [--sentences 200]     (needs eflomal: make eval-documents)
    python scripts/eval_documents.py segmenters        (sentencex against pysbd and blingfire, where installed)

``paragraphs``: each Multi30k test set of the model's pair (test2016 and valid, from ``--data``) grouped
into paragraphs of 3-8 consecutive sentences (a fixed seed), each sentence ending in a full stop (a caption
without one gets one, in the source and the reference, so a paragraph reads as prose). Three ways, scored
with sacreBLEU on the paragraphs (hypotheses and references joined with a space): every sentence on a line
of its own (the reference point), each paragraph as one text with splitting on (what mt-translate and
mt-serve do), and with splitting off (the paragraph sent to the model whole, as before). The same without
the added full stops is printed too: captions without one run into the next sentence.

``tags``: ``--sentences`` test2016 sentences of 4 words or more, each with 1-3 inline tags (``b``, ``i``,
``a``; every fourth sentence one nested ``em``) around word spans a seeded rule picks, translated as HTML.
The reference for a tag: the target words that eflomal (Östling and Tiedemann 2016; trained on the Multi30k
training pairs plus the evaluated pairs, grow-diag-final-and) links to its source words, in the model's own
translation; a tag is right when it covers exactly the words from the first to the last of them. Tags whose
words eflomal links to nothing are counted apart. Each alignment setting (decoder layer, shift, how the two
directions are joined) is scored on the same translations; a second eflomal run scored against the first
shows how far the reference itself moves (eflomal samples).
"""

from __future__ import annotations

import argparse
import gzip
import html
import random
import re
import sys
import tempfile
import time
from pathlib import Path

import lxml.html
import sacrebleu

from mt.checkpoint import load_models_for_inference
from mt.cli.documents import plan_document, translate_plan
from mt.decode import Translator
from mt.decode.align import ALL_LAYERS, MIDDLE, SYMMETRISATIONS, grow_diag_final_and
from mt.document.model import Unit
from mt.document.plain import TextDocument
from mt.document.plan import Translated
from mt.document.project import word_spans

DATA = Path(__file__).resolve().parents[1].parent / "shared" / "data" / "multi30k"
SETS = {"test2016": "test_2016_flickr", "valid": "val"}
END = re.compile(r"[.!?…]['\"»«”’)]*$")


def read(path: Path) -> list[str]:
    with gzip.open(path, "rt", encoding="utf-8") as f:
        return [line.rstrip("\n").strip() for line in f]


def full_stop(sentence: str) -> str:
    return sentence if END.search(sentence) else sentence + "."


def paragraphs(count: int, seed: int) -> list[tuple[int, int]]:
    rng, out, start = random.Random(seed), [], 0
    while start < count:
        end = min(count, start + rng.randint(3, 8))
        out.append((start, end))
        start = end
    return out


def load(ckpt: Path) -> tuple[Translator, str, str]:
    model, tokenizers, cfg = load_models_for_inference([ckpt], "cpu", pack=True)
    translator = Translator(model, tokenizers, cfg.decode, "cpu", max_positions=cfg.model.max_positions)
    return translator, cfg.data.src_lang, cfg.data.tgt_lang


def translate_texts(translator: Translator, texts: list[str], language: str, split: bool) -> list[str]:
    plan = plan_document(translator, TextDocument([Unit(t) for t in texts]), language, None, split)
    return [u.text for u in plan.assemble(translate_plan(translator, plan, None))]


def run_paragraphs(args: argparse.Namespace) -> None:
    translator, src, tgt = load(args.ckpt)
    print("| set | full stops | sentences | paragraphs | one a line | paragraphs, split | paragraphs, not split |")
    print("| --- | --- | ---: | ---: | ---: | ---: | ---: |")
    for name, prefix in SETS.items():
        sources, refs = read(args.data / f"{prefix}.{src}.gz"), read(args.data / f"{prefix}.{tgt}.gz")
        for stops in (True, False):
            s = [full_stop(x) for x in sources] if stops else sources
            r = [full_stop(x) for x in refs] if stops else refs
            groups = paragraphs(len(s), args.seed)
            start = time.monotonic()
            lines = translator.translate(s)
            joined = [" ".join(lines[a:b]) for a, b in groups]
            texts = [" ".join(s[a:b]) for a, b in groups]
            split = translate_texts(translator, texts, src, True)
            whole = translate_texts(translator, texts, src, False)
            ref = [[" ".join(r[a:b]) for a, b in groups]]
            bleu = [sacrebleu.corpus_bleu(h, ref).score for h in (joined, split, whole)]
            print(f"| {name} | {'added' if stops else 'as given'} | {len(s)} | {len(groups)} | {bleu[0]:.2f} | "
                  f"{bleu[1]:.2f} | {bleu[2]:.2f} |  ({time.monotonic() - start:.0f} s)", flush=True)


DEFAULT_SETTINGS = ",".join([
    "-100:0:grow-diag-final-and", "-100:0:union", "-100:0:target", "-1:0:grow-diag-final-and", "-1:0:union",
    "99:0:grow-diag-final-and", "-100:1:grow-diag-final-and",
])
TAG_NAMES = ("b", "i", "a")
PUNCTUATION = re.compile(r"^\W+|\W+$")


def tagged(sentence: str, rng: random.Random, nested: bool) -> tuple[str, dict[str, tuple[int, int]]]:
    """``sentence`` as HTML with 1-3 tags around word spans (ids t0, t1, ...), and each tag's source words."""
    words = sentence.split()
    spans, taken = {}, set()
    for k in range(rng.randint(1, 3)):
        length = rng.randint(1, min(3, len(words)))
        first = rng.randrange(0, len(words) - length + 1)
        if taken & set(range(first - 1, first + length + 1)):
            continue  # tags never touch: each is its own span of words
        taken |= set(range(first, first + length))
        spans[f"t{k}"] = (first, first + length - 1)
    if nested and spans and (first_tag := min(spans, key=lambda t: spans[t][0])) and \
            spans[first_tag][1] > spans[first_tag][0]:
        spans["n"] = (spans[first_tag][0], spans[first_tag][0])
    opening: dict[int, list[str]] = {}
    closing: dict[int, list[str]] = {}
    for i, (tag, (a, b)) in enumerate(sorted(spans.items(), key=lambda kv: (kv[1][0], kv[0] == "n"))):
        name = "em" if tag == "n" else TAG_NAMES[i % len(TAG_NAMES)]
        attrs = f' id="{tag}"' + (' href="https://example.org/"' if name == "a" else "")
        opening.setdefault(a, []).append(f"<{name}{attrs}>")
        closing.setdefault(b, []).insert(0, f"</{name}>")
    parts = ["".join(opening.get(w, [])) + html.escape(word, quote=False) + "".join(closing.get(w, []))
             for w, word in enumerate(words)]
    return "<p>" + " ".join(parts) + "</p>", spans


def tag_spans(fragment: str) -> tuple[str, dict[str, tuple[int, int]]]:
    """The text of an HTML fragment and the character span of each element with an id."""
    root = lxml.html.fragment_fromstring(fragment, create_parent="div")
    spans: dict[str, tuple[int, int]] = {}
    parts: list[str] = []

    def walk(element) -> None:
        start = sum(map(len, parts))
        parts.append(element.text or "")
        for child in element:
            walk(child)
            parts.append(child.tail or "")
        if element.get("id"):
            spans[element.get("id")] = (start, sum(map(len, parts)))

    walk(root)
    return "".join(parts), spans


def covered_words(text: str, span: tuple[int, int]) -> tuple[int, int] | None:
    """The first and last word (``\\S+``, punctuation around it left out) a character span covers."""
    inside = [w for w, (a, b) in enumerate(word_spans(text)) if a < span[1] and b > span[0]]
    return (inside[0], inside[-1]) if inside else None


def align_tokens(sentence: str) -> str:
    return " ".join(PUNCTUATION.sub("", w.lower()) or w for w in sentence.split())


def reference_links(args: argparse.Namespace, sources: list[str], targets: list[str], src: str, tgt: str
                    ) -> list[set[tuple[int, int]]]:
    """eflomal's links (grow-diag-final-and) of each (source, target), trained with the training pairs."""
    import eflomal

    train_src = read(args.data / f"train.{src}.gz")
    train_tgt = read(args.data / f"train.{tgt}.gz")
    with tempfile.TemporaryDirectory() as tmp:
        fwd, rev = Path(tmp) / "fwd", Path(tmp) / "rev"
        eflomal.Aligner().align([align_tokens(s) for s in train_src + sources],
                                [align_tokens(t) for t in train_tgt + targets],
                                links_filename_fwd=str(fwd), links_filename_rev=str(rev), quiet=True)
        forward = fwd.read_text().splitlines()[len(train_src):]
        reverse = rev.read_text().splitlines()[len(train_src):]
    return [grow_diag_final_and(parse_links(f), parse_links(r)) for f, r in zip(forward, reverse, strict=True)]


def parse_links(line: str) -> set[tuple[int, int]]:
    return {(int(a), int(b)) for a, b in (pair.split("-") for pair in line.split())}


def run_tags(args: argparse.Namespace) -> None:
    from mt.document.formats.html import read_fragment

    translator, src, tgt = load(args.ckpt)
    sources = [s for s in read(args.data / f"test_2016_flickr.{src}.gz") if len(s.split()) >= 4][: args.sentences]
    rng = random.Random(args.seed)
    items = [tagged(s, rng, nested=i % 4 == 3) for i, s in enumerate(sources)]
    documents = [read_fragment(h) for h, _ in items]
    plans = [plan_document(translator, d, src, None) for d in documents]
    sentences = [s for p in plans for s in p.sentences]
    translations = translator.translate_nbest(sentences, scores=False)
    outputs_by_setting = {}
    import mt.decode.align as aligner

    for setting in args.settings.split(","):
        layer, shift, how = parse_setting(setting)
        aligner.SYMMETRISE = how
        start = time.monotonic()
        links = translator.align(sentences, translations, None, layer=layer, shift=bool(shift))
        seconds = time.monotonic() - start
        at, written = 0, []
        for document, plan in zip(documents, plans, strict=True):
            n = len(plan.sentences)
            done = [Translated(t.text, k) for t, k in zip(translations[at : at + n], links[at : at + n], strict=True)]
            written.append(tag_spans(document.write(plan.assemble(done)).decode("utf-8")))
            at += n
        outputs_by_setting[setting] = (written, seconds)
    first = next(iter(outputs_by_setting.values()))[0]
    targets = [text for text, _ in first]
    reference = reference_links(args, sources, targets, src, tgt)
    print(f"{len(sources)} sentences, {sum(len(s) for _, s in items)} tags; reference: eflomal, grow-diag-final-and")
    print("| decoder layer | shift | links | tags right | of tags with a reference | tags without one | align s |")
    print("| ---: | --- | --- | ---: | ---: | ---: | ---: |")
    other = reference_links(args, sources, targets, src, tgt)  # eflomal samples: a second run differs a little
    agreed = [span_of(a, *span) == span_of(b, *span) for (_, spans), a, b in zip(items, reference, other, strict=True)
              for span in spans.values() if span_of(a, *span) and span_of(b, *span)]
    print(f"| eflomal, another run | | | {100 * sum(agreed) / max(len(agreed), 1):.1f}% | {len(agreed)} | | |")
    for setting, (written, seconds) in outputs_by_setting.items():
        right = judged = unreferenced = 0
        for (_, spans), (text, found), links in zip(items, written, reference, strict=True):
            for tag, (a, b) in spans.items():
                expected = span_of(links, a, b)
                if not expected:
                    unreferenced += 1
                    continue
                judged += 1
                right += tag in found and covered_words(text, found[tag]) == expected
        layer, shift, how = parse_setting(setting)
        name = {ALL_LAYERS: "all (mean)", MIDDLE: "middle"}.get(layer, str(layer))
        print(f"| {name} | {'yes' if shift else 'no'} | {how} | "
              f"{100 * right / max(judged, 1):.1f}% | {judged} | {unreferenced} | {seconds:.1f} |")


def span_of(links: set[tuple[int, int]], first: int, last: int) -> tuple[int, int] | None:
    """The first and last target word linked to the source words ``first .. last`` (None: none is linked)."""
    targets = sorted(t for s, t in links if first <= s <= last)
    return (targets[0], targets[-1]) if targets else None


def parse_setting(setting: str) -> tuple[int, bool, str]:
    """``layer:shift:links`` (``-100:0:grow-diag-final-and``) as (layer, shift, symmetrisation)."""
    layer, shift, how = setting.split(":")
    if how not in SYMMETRISATIONS:
        raise SystemExit(f"--settings {setting}: links must be one of {', '.join(SYMMETRISATIONS)}")
    return int(layer), shift == "1", how


def run_segmenters(args: argparse.Namespace) -> None:
    """Each candidate segmenter on the paragraphs of every language's test2016: how many paragraphs it splits
    exactly into their sentences, and its time per paragraph (pysbd and blingfire only if installed)."""
    import sentencex

    candidates = {"sentencex": lambda lang: lambda t: list(sentencex.segment(lang, t))}
    try:
        import pysbd

        candidates["pysbd"] = lambda lang: pysbd.Segmenter(language=lang, clean=False).segment
    except ImportError:
        print("pysbd not installed (pip install pysbd==0.3.4): left out")
    try:
        import blingfire

        candidates["blingfire"] = lambda lang: lambda t: blingfire.text_to_sentences(t).split("\n")
    except ImportError:
        print("blingfire not installed (pip install blingfire==0.1.8): left out")
    print("| language | segmenter | paragraphs split exactly | ms per paragraph |")
    print("| --- | --- | ---: | ---: |")
    for lang in ("en", "de", "fr", "cs"):
        sentences = [full_stop(s) for s in read(args.data / f"test_2016_flickr.{lang}.gz")]
        groups = [sentences[a:b] for a, b in paragraphs(len(sentences), args.seed)]
        for name, make in candidates.items():
            try:
                split = make(lang)
            except (ValueError, KeyError) as e:
                print(f"| {lang} | {name} | no rules for {lang} ({type(e).__name__}) | |")
                continue
            start = time.monotonic()
            exact = sum([s.strip() for s in split(" ".join(g)) if s.strip()] == g for g in groups)
            ms = 1000 * (time.monotonic() - start) / len(groups)
            print(f"| {lang} | {name} | {exact}/{len(groups)} ({100 * exact / len(groups):.1f}%) | {ms:.2f} |")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sub = parser.add_subparsers(dest="command", required=True)
    for name in ("paragraphs", "tags", "segmenters"):
        p = sub.add_parser(name)
        p.add_argument("--ckpt", type=Path, required=name != "segmenters")
        p.add_argument("--data", type=Path, default=DATA)
        p.add_argument("--seed", type=int, default=0)
        if name == "tags":
            p.add_argument("--sentences", type=int, default=200)
            p.add_argument("--settings", default=DEFAULT_SETTINGS,
                           help="decoder layer:shift:links to score (layer -100: the middle one, 99: the mean of all; "
                                "links: grow-diag-final-and, union or target; default: %(default)s)")
    args = parser.parse_args(argv)
    if args.command == "paragraphs":
        run_paragraphs(args)
    elif args.command == "segmenters":
        run_segmenters(args)
    else:
        run_tags(args)
    return 0


if __name__ == "__main__":
    sys.exit(main())
