"""``mt-eval`` / ``python -m mt.cli.evaluate``: translate a test set and write a scored report.

Examples:
    mt-eval --exp demo --split test                    # the run's configured test split
    mt-eval --ckpt runs/m30k/checkpoints/best.pt \\
        --src ../shared/data/multi30k/test_2016_flickr.en.gz --ref ../shared/data/multi30k/test_2016_flickr.de.gz

Writes ``<out-dir>/<name>.json`` and ``.md`` (sacreBLEU BLEU/chrF/TER with signatures, lowercased
BLEU for comparison with papers, decoding settings, checkpoint step and config, speed, examples),
``<name>.hyp.txt`` and ``<name>.align-<line>.png`` cross-attention heatmaps for the ``--align`` lines;
all of them or, when something fails, none.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
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
    add_model_args(parser)
    data = parser.add_argument_group("test data: --src and --ref, or --split")
    data.add_argument("--src", type=Path, help="source file, plain or .gz")
    data.add_argument("--ref", type=Path, help="reference file, plain or .gz")
    data.add_argument("--split", choices=("train", "valid", "test"), help="a split of the checkpoint's data config")
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


def evaluate_checkpoint(args: argparse.Namespace) -> None:
    """The command: check the paths, load the model and the test set, write the report, print the scores."""
    from mt.eval.report import evaluate

    for path, flag in ((args.src, "--src"), (args.ref, "--ref")):
        if path is not None:
            check_input_file(path, flag)
    check_output_dir(args.out_dir, "--out-dir")
    translator, cfg, path = load_translator(args)
    sources, refs, data = load_texts(args, cfg)
    check_lengths(translator, sources, str(args.src) if args.src is not None else f"split {args.split}")
    name = args.name or default_name(cfg, args, translator.cfg.strategy, translator.cfg.beam_size)
    checkpoint = {"path": str(path), "step": checkpoint_step(path), "config": to_dict(cfg)}
    report = evaluate(
        translator, sources, refs, out_dir=args.out_dir, name=name, checkpoint=checkpoint, data=data,
        align=args.align, lowercase_tokenized=not args.no_lowercase_bleu, n_examples=args.examples,
        progress=True,
    )
    for metric in report["metrics"].values():
        print(f"{metric['name']}: {metric['score']:.2f}  ({metric['signature']})")
    speed = report["speed"]
    print(f"{speed['sentences_per_s']:.1f} sentences/s, {speed['tgt_tokens_per_s']:.1f} target tokens/s")
    print(f"report: {args.out_dir / name}.md (and .json)")


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    return run_command("mt-eval", lambda: evaluate_checkpoint(args), args.debug)


if __name__ == "__main__":
    sys.exit(main())
