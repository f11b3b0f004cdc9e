"""``mt-import`` / ``python -m mt.cli.import_model``: a pretrained model from elsewhere as an mt checkpoint.

Examples:
    mt-import --from hf models/opus-mt-en-de --out models/opus-mt-en-de.pt
    mt-import --from hf ~/downloads/my-marian --out marian.pt --source-lang en --target-lang de
    mt-import --from hf models/nllb-200-distilled-600M --out nllb.pt

``--from hf`` reads a Hugging Face ``MarianMTModel`` directory (OPUS-MT, or ``mt-export --to hf``) or an
``M2M100ForConditionalGeneration`` one (M2M-100, NLLB-200) as ``save_pretrained`` or the Hub's download leaves
it: ``config.json``, ``model.safetensors`` or ``pytorch_model.bin`` (read as tensors only), the tokenizer files
(Marian's ``source.spm``, ``target.spm``, ``vocab.json``; ``sentencepiece.bpe.model`` with NLLB's
``tokenizer.json`` or M2M-100's ``vocab.json``). Nothing is downloaded. The checkpoint then works with every
mt command: mt-translate, mt-eval, mt-serve, mt-export, and mt-train (``EXP=finetune``). What mt cannot
represent is refused by its config.json field.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from pathlib import Path

from mt.cli.flags import add_version_flag

SOURCES = ("hf",)


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        prog="mt-import", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    add_version_flag(parser)
    parser.add_argument("--from", dest="source", required=True, choices=SOURCES, help="the model's library")
    parser.add_argument("directory", type=Path, help="the model directory (downloaded or saved beforehand)")
    parser.add_argument("--out", required=True, type=Path, help="the mt checkpoint to write (model.pt)")
    parser.add_argument("--source-lang", help="the source language, when the directory does not name it")
    parser.add_argument("--target-lang", help="the target language, when the directory does not name it")
    parser.add_argument("--force", action="store_true", help="replace --out if it exists")
    return parser.parse_args(argv)


def main(argv: Sequence[str] | None = None) -> int:
    from mt.cli.errors import run_command

    args = parse_args(argv)

    def command() -> int:
        from mt.pretrained import import_hf
        from mt.pretrained.convert import model_summary

        report = import_hf(args.directory, args.out, source_lang=args.source_lang, target_lang=args.target_lang,
                           force=args.force)
        data = report.cfg.data
        print(f"mt-import: wrote {report.out}: {report.architecture} {data.src_lang}-{data.tgt_lang}, "
              f"{report.parameters / 1e6:.1f} M parameters ({model_summary(report.cfg.model)})", file=sys.stderr)
        return 0

    return run_command("mt-import", command)


if __name__ == "__main__":
    sys.exit(main())
