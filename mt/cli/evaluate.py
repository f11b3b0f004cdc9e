"""``mt-eval`` / ``python -m mt.cli.evaluate``: translate a test set and write a scored report.

Examples:
    mt-eval --exp demo --split test                    # the run's configured test split
    mt-eval --ckpt runs/m30k/checkpoints/best.pt \\
        --src ../shared/data/multi30k/test_2016_flickr.en.gz --ref ../shared/data/multi30k/test_2016_flickr.de.gz

Writes ``<out-dir>/<name>.json`` and ``.md`` (sacreBLEU BLEU/chrF/TER with signatures, lowercased
BLEU for comparison with papers, decoding settings, checkpoint step and config, speed, examples),
``<name>.hyp.txt`` and ``<name>.align-<line>.png`` cross-attention heatmaps for the ``--align`` lines;
all of them or, when something fails, none.

A checkpoint of several language pairs (``data.pairs``) is scored pair by pair: ``--split`` reports every
pair (or the one ``--pair en-fr`` names), each as ``<name>.<pair>.json`` / ``.md``, prints one row per pair
and their mean and writes the table to ``<name>.pairs.json``; ``--src``/``--ref`` with a multilingual
checkpoint need ``--pair`` to say which target language the references are in.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import sys
from collections.abc import Collection, Sequence
from pathlib import Path

from mt.cli.errors import run_command
from mt.cli.flags import add_decode_args, add_model_args, add_version_flag, ranged
from mt.cli.output import check_input_file, check_output_dir
from mt.cli.translate import check_lengths, load_translator
from mt.config import Config, to_dict


def load_texts(args: argparse.Namespace, cfg: Config) -> tuple[list[str], list[str], dict]:
    """Sources, references and a description of where they came from (files or the config's split).

    A split is read raw with ``open_split`` (what ``prepare_data`` reads first): the references must be
    untokenized text and the checkpoint brings its own tokenizer, so nothing is trained or binarized.
    """
    from mt.data import DataError, open_split, read_lines

    if args.split is not None:
        raw = open_split(cfg.data, args.split, Path(cfg.data.cache_dir))
        rows = raw.load()
        return list(rows["src"]), list(rows["tgt"]), {"split": args.split, "description": raw.description}
    sources, refs = list(read_lines(args.src)), list(read_lines(args.ref))
    if len(sources) != len(refs):
        raise DataError(
            f"sources and references differ in length: {args.src} has {len(sources)} lines, "
            f"{args.ref} has {len(refs)} lines"
        )
    return sources, refs, {"src": str(args.src), "ref": str(args.ref)}


def checkpoint_step(path: Path) -> int | None:
    """The update count stored in the checkpoint (None if it has none)."""
    from mt.checkpoint import load_checkpoint

    train_state = load_checkpoint(path).get("train_state") or {}
    return train_state.get("step")


def default_name(cfg: Config, args: argparse.Namespace, strategy: str, beam: int) -> str:
    data = args.split if args.split is not None else Path(args.src).name.removesuffix(".gz")
    search = f"beam{beam}" if strategy == "beam" else strategy
    return f"{cfg.name}.{data}.{search}"


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="mt-eval", description=__doc__.split("\n\n")[0])
    add_version_flag(parser)
    add_model_args(parser, ensemble=True)
    data = parser.add_argument_group("test data: --src and --ref, or --split")
    data.add_argument("--src", type=Path, help="source file, plain or .gz")
    data.add_argument("--ref", type=Path, help="reference file, plain or .gz")
    data.add_argument("--split", choices=("train", "valid", "test"), help="a split of the checkpoint's data config")
    data.add_argument("--pair", help="one language pair of a checkpoint of several (e.g. en-fr): with --split "
                      "only it is scored (default: every pair), with --src/--ref the model translates into its target")
    parser.add_argument("--out-dir", type=Path, default=Path("reports"))
    parser.add_argument("--name", help="report name (default: <experiment>.<data>.<search>)")
    parser.add_argument("--align", type=ranged(int, 1), nargs="*", default=[1], help="1-based lines to plot")
    parser.add_argument("--examples", type=ranged(int, 0), default=5, help="examples shown in the report")
    parser.add_argument("--no-lowercase-bleu", action="store_true", help="skip the lowercased 13a BLEU")
    add_decode_args(parser)
    args = parser.parse_args(argv)
    if (args.split is None) == (args.src is None or args.ref is None):
        parser.error("give either --src and --ref, or --split")
    if args.name is not None and (not args.name or Path(args.name).name != args.name):
        parser.error(f"--name must be a file name without a directory, got '{args.name}' (use --out-dir)")
    return args


def pairs_to_score(args: argparse.Namespace, cfg: Config, coded: Collection[str] = ()) -> list:
    """The checkpoint's language pairs to score: ``--pair`` or, for ``--split``, every pair (one for a one-pair model).

    ``coded``: the languages of a model with language codes (M2M-100, NLLB), any two of which make a pair.
    ``LanguageError`` for a ``--pair`` the model was not trained on, or ``--src`` with a multilingual model
    and no ``--pair`` (its references are in one target language).
    """
    from mt.data.languages import LanguageError, data_pairs, is_multilingual, parse_pair

    pairs = data_pairs(cfg.data)
    if args.pair is not None:
        chosen = parse_pair(args.pair)
        if chosen not in pairs and not {chosen.src, chosen.tgt} <= set(coded):
            have = ", ".join(p.name for p in pairs)
            raise LanguageError(f"--pair {args.pair}: this model's pairs are {have}")
        return [chosen]
    if args.split is not None:
        return pairs
    if is_multilingual(cfg.data):
        targets = ", ".join(p.name for p in pairs)
        raise LanguageError(f"this model translates {targets}: say which pair --src/--ref are with --pair")
    return pairs[:1]


def evaluate_checkpoint(args: argparse.Namespace) -> None:
    """The command: check the paths, load the model and the test set(s), write the report(s), print the scores."""
    from mt.data.languages import data_pairs, is_multilingual
    from mt.data.pair_sources import pair_config

    for path, flag in ((args.src, "--src"), (args.ref, "--ref")):
        if path is not None:
            check_input_file(path, flag)
    check_output_dir(args.out_dir, "--out-dir")
    translator, cfg, paths = load_translator(args)
    coded = translator.tokenizers.src.language_codes
    pairs = pairs_to_score(args, cfg, coded)
    several = len(data_pairs(cfg.data)) > 1
    base = args.name or default_name(cfg, args, translator.cfg.strategy, translator.cfg.beam_size)
    stored = [{"path": str(path), "step": checkpoint_step(path)} for path in paths]  # each file read once
    checkpoint = {**stored[0], "config": to_dict(cfg)}
    if len(paths) > 1:
        checkpoint["ensemble"] = stored
    reports = {}
    for pair in pairs:
        pair_cfg = dataclasses.replace(cfg, data=pair_config(cfg.data, pair))
        sources, refs, data = load_texts(args, pair_cfg)
        target_lang = pair.tgt if is_multilingual(cfg.data) else None
        where = str(args.src) if args.src is not None else f"split {args.split}"
        pair_translator = translator.for_source(pair.src) if coded else translator  # the pair's source code first
        check_lengths(pair_translator, sources, where, target=target_lang)
        name = f"{base}.{pair.name}" if several else base
        reports[pair.name] = report = evaluate_pair(
            args, pair_translator, sources, refs, name=name, checkpoint=checkpoint,
            data={**data, **({"pair": pair.name} if several else {})}, target_lang=target_lang,
        )
        prefix = f"{pair.name}  " if several else ""
        for metric in report["metrics"].values():
            print(f"{prefix}{metric['name']}: {metric['score']:.2f}  ({metric['signature']})")
        speed = report["speed"]
        print(f"{prefix}{speed['sentences_per_s']:.1f} sentences/s, {speed['tgt_tokens_per_s']:.1f} target tokens/s")
        print(f"{prefix}report: {args.out_dir / name}.md (and .json)")
    if len(reports) > 1:
        table = pair_table(reports)
        for metric, value in table["mean"].items():
            print(f"mean over {len(reports)} pairs  {metric}: {value:.2f}")
        (args.out_dir / f"{base}.pairs.json").write_text(json.dumps(table, indent=2) + "\n", encoding="utf-8")
        print(f"per-pair table: {args.out_dir / base}.pairs.json")


def evaluate_pair(args: argparse.Namespace, translator, sources: list[str], refs: list[str], **kwargs) -> dict:
    """One report (``mt.eval.report.evaluate``) with the command line's report settings."""
    from mt.eval.report import evaluate

    return evaluate(
        translator, sources, refs, out_dir=args.out_dir, align=args.align,
        lowercase_tokenized=not args.no_lowercase_bleu, n_examples=args.examples, progress=True, **kwargs,
    )


def pair_table(reports: dict[str, dict]) -> dict:
    """Every pair's scores (metric name -> score, its report's file) and each metric's mean over the pairs."""
    rows = {
        pair: {"report": f"{report['name']}.json", **{m["name"]: m["score"] for m in report["metrics"].values()}}
        for pair, report in reports.items()
    }
    metrics = [m["name"] for m in next(iter(reports.values()))["metrics"].values()]
    return {"pairs": rows, "mean": {m: sum(row[m] for row in rows.values()) / len(rows) for m in metrics}}


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    return run_command("mt-eval", lambda: evaluate_checkpoint(args), args.debug)


if __name__ == "__main__":
    sys.exit(main())
