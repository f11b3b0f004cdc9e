"""``mt-translate`` / ``python -m mt.translate``: translate text with a trained checkpoint.

Examples:
    python -m mt.translate --input test.en --output test.hyp          # runs/demo/checkpoints/best.pt
    echo "twenty-one" | python -m mt.translate --exp demo --strategy greedy
    python -m mt.translate --ckpt runs/x/checkpoints/best.pt --beam 5 --lenpen gnmt --alpha 1.0

Reads ``--input`` (plain or .gz) or stdin, writes ``--output`` or stdout, one line per input line (empty
in, empty out). With ``--nbest N`` (> 1) each input gives N lines ``LINE ||| hypothesis ||| score``.
With a terminal on stdin it translates interactively, line by line. The checkpoint's ``decode``
settings are the defaults; flags override them.
"""

from __future__ import annotations

import argparse
import dataclasses
import sys
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import TextIO

import torch

from mt.config import Config, DecodeConfig
from mt.decode import Translation, Translator

# flag -> DecodeConfig field; None values (flag not given) keep the checkpoint's setting
DECODE_FLAGS = {
    "strategy": "strategy",
    "beam": "beam_size",
    "nbest": "nbest",
    "lenpen": "length_penalty",
    "alpha": "alpha",
    "max_len_a": "max_len_a",
    "max_len_b": "max_len_b",
    "temperature": "temperature",
    "top_k": "top_k",
    "top_p": "top_p",
    "seed": "seed",
    "max_tokens": "max_tokens",
    "max_sentences": "max_sentences",
    "on_too_long": "on_too_long",
}


def add_model_args(parser: argparse.ArgumentParser) -> None:
    """``--ckpt``/``--exp``, ``--device``, ``--threads``."""
    parser.add_argument("--ckpt", type=Path, help="checkpoint (default: runs/<exp>/checkpoints/best.pt)")
    parser.add_argument("--exp", default="demo", help="experiment name for the default checkpoint")
    parser.add_argument("--device", default="auto", help="cpu | cuda | cuda:N | auto (cuda if available)")
    parser.add_argument("--threads", type=int, default=0, help="CPU threads for torch (0 = torch default)")


def add_decode_args(parser: argparse.ArgumentParser) -> None:
    """Search settings; each overrides the checkpoint's ``decode`` config when given."""
    g = parser.add_argument_group("decoding (default: the checkpoint's decode settings)")
    g.add_argument("--strategy", choices=("beam", "greedy", "sample"))
    g.add_argument("--beam", type=int, help="beam size")
    g.add_argument("--nbest", type=int, help="hypotheses per input (beam search)")
    g.add_argument("--lenpen", choices=("gnmt", "length", "none"), help="length penalty")
    g.add_argument("--alpha", type=float, help="length penalty exponent")
    g.add_argument("--max-len-a", type=float, help="max output length = a * |src| + b")
    g.add_argument("--max-len-b", type=int)
    g.add_argument("--temperature", type=float, help="sampling temperature")
    g.add_argument("--top-k", type=int, help="sample from the k most likely tokens (0 = all)")
    g.add_argument("--top-p", type=float, help="nucleus sampling mass (1 = all)")
    g.add_argument("--seed", type=int, help="sampling seed")
    g.add_argument("--max-tokens", type=int, help="batch budget: source tokens x beam")
    g.add_argument("--max-sentences", type=int, help="sentences per batch at most")
    g.add_argument("--on-too-long", choices=("truncate", "reject"), help="sources longer than the model allows")


def decode_config(base: DecodeConfig, args: argparse.Namespace) -> DecodeConfig:
    """``base`` with every decoding flag that was given applied."""
    given = {field: getattr(args, flag) for flag, field in DECODE_FLAGS.items() if getattr(args, flag) is not None}
    return dataclasses.replace(base, **given)


def resolve_device(name: str) -> torch.device:
    if name == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    return torch.device(name)


def checkpoint_path(args: argparse.Namespace) -> Path:
    return args.ckpt if args.ckpt is not None else Path("runs") / args.exp / "checkpoints" / "best.pt"


def load_translator(args: argparse.Namespace) -> tuple[Translator, Config, Path]:
    """Load the checkpoint named by ``args`` and wrap it in a Translator with the merged settings."""
    from mt.checkpoint import load_for_inference

    if args.threads > 0:
        torch.set_num_threads(args.threads)
    path, device = checkpoint_path(args), resolve_device(args.device)
    model, tokenizers, cfg = load_for_inference(path, device)
    decode = decode_config(cfg.decode, args)
    translator = Translator(model, tokenizers, decode, device, max_positions=cfg.model.max_positions)
    return translator, cfg, path


def format_output(translation: Translation, line: int, nbest: int) -> str:
    """The best hypothesis, or with ``nbest > 1`` its n-best as ``LINE ||| text ||| score`` lines."""
    if nbest <= 1:
        return translation.text + "\n"
    pairs = zip(translation.texts, translation.hypotheses, strict=True)
    return "".join(f"{line} ||| {text} ||| {hyp.score:.4f}\n" for text, hyp in pairs)


def write_all(translator: Translator, lines: Sequence[str], out: TextIO, progress: bool) -> None:
    nbest = translator.cfg.nbest if translator.cfg.strategy == "beam" else 1
    for number, translation in enumerate(translator.translate_nbest(lines, progress=progress), start=1):
        out.write(format_output(translation, number, nbest))


def interactive(translator: Translator, lines: Iterable[str], out: TextIO) -> None:
    """Translate each line as it is typed (Ctrl-D ends)."""
    nbest = translator.cfg.nbest if translator.cfg.strategy == "beam" else 1
    for number, line in enumerate(lines, start=1):
        out.write(format_output(translator.translate_nbest([line.rstrip("\n")])[0], number, nbest))
        out.flush()


def read_input(path: Path | None) -> list[str]:
    if path is None:
        return [line.rstrip("\n") for line in sys.stdin]
    from mt.data import read_lines

    return list(read_lines(path))


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="mt-translate", description=__doc__.split("\n\n")[0])
    add_model_args(parser)
    parser.add_argument("--input", type=Path, help="input file, plain or .gz (default: stdin)")
    parser.add_argument("--output", type=Path, help="output file (default: stdout)")
    add_decode_args(parser)
    args = parser.parse_args(argv)
    from mt.checkpoint import CheckpointError
    from mt.data import DataError

    try:
        translator, _, path = load_translator(args)
        print(f"mt-translate: {path} on {translator.device}, {translator.cfg}", file=sys.stderr)
        out = sys.stdout if args.output is None else args.output.open("w", encoding="utf-8")
        try:
            if args.input is None and sys.stdin.isatty():
                print("type a sentence per line (Ctrl-D to quit)", file=sys.stderr)
                interactive(translator, sys.stdin, out)
            else:
                write_all(translator, read_input(args.input), out, progress=args.input is not None)
        finally:
            if out is not sys.stdout:
                out.close()
    except (CheckpointError, DataError, ValueError, OSError) as e:
        print(f"mt-translate: error: {e}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
