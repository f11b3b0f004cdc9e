"""``mt-export`` / ``python -m mt.cli.export``: a checkpoint as a CTranslate2 or Hugging Face model directory.

Examples:
    mt-export --to ctranslate2 --ckpt runs/demo/checkpoints/best.pt --out exports/demo-ct2
    mt-export --to ctranslate2 --ckpt best.pt --out exports/demo-ct2-int8 --quantization int8
    mt-export --to hf --ckpt runs/demo/checkpoints/best.pt --out exports/demo-hf --force

Each directory gets a README.md with the code to translate with it (the checkpoint's decoding
settings as defaults) and what differs from ``mt-translate``. Options a target cannot represent
(Pre-LN for Hugging Face Marian, for one) are refused with a message naming the option.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from pathlib import Path

from mt.cli.flags import add_version_flag
from mt.errors import UserError

TARGETS = ("ctranslate2", "hf")


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        prog="mt-export", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    add_version_flag(parser)
    parser.add_argument("--to", required=True, choices=TARGETS, help="the library to export to")
    parser.add_argument("--ckpt", required=True, type=Path, help="an mt checkpoint (best.pt, averaged.pt, ...)")
    parser.add_argument("--out", required=True, type=Path, help="the model directory to write")
    parser.add_argument(
        "--quantization", help="CTranslate2 weight type: int8, int8_float32, int8_float16, int16, float16, ..."
    )
    parser.add_argument("--force", action="store_true", help="replace --out if it exists")
    return parser.parse_args(argv)


def export(args: argparse.Namespace) -> list[str]:
    """Run the export ``args`` describe; returns the notes on what differs from mt."""
    if args.to == "ctranslate2":
        from mt.export.ctranslate2 import export_ctranslate2

        return export_ctranslate2(args.ckpt, args.out, args.quantization, args.force)
    if args.quantization is not None:
        raise UserError(f"--quantization {args.quantization} applies to --to ctranslate2 only")
    from mt.export.hf import export_hf

    return export_hf(args.ckpt, args.out, args.force)


def main(argv: Sequence[str] | None = None) -> int:
    from mt.cli.errors import run_command

    args = parse_args(argv)

    def command() -> int:
        notes = export(args)
        print(f"mt-export: wrote {args.out} ({args.to}); usage in {args.out / 'README.md'}", file=sys.stderr)
        for note in notes:
            print(f"mt-export: note: {note}", file=sys.stderr)
        return 0

    return run_command("mt-export", command)


if __name__ == "__main__":
    sys.exit(main())
