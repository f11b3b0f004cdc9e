"""``mt-translate`` / ``python -m mt.cli.translate``: translate text with a trained checkpoint.

Examples:
    mt-translate --input test.en --output test.hyp          # runs/demo/checkpoints/best.pt
    echo "twenty-one" | mt-translate --exp demo --strategy greedy
    mt-translate --ckpt runs/x/checkpoints/best.pt --beam 5 --lenpen gnmt --alpha 1.0
    mt-translate --ckpt runs/multi/checkpoints/best.pt --target-lang fr --input test.en
    mt-translate --ckpt m2m100.pt --source-lang en --target-lang fr --input test.en   # mt-import'ed M2M-100

Reads ``--input`` (plain or .gz) or stdin, writes ``--output`` or stdout, one line per input line (empty
in, empty out). With ``--nbest N`` (> 1) each input gives N lines ``LINE ||| hypothesis ||| score``.
With a terminal on stdin it translates interactively, line by line. The checkpoint's ``decode``
settings are the defaults; flags override them. A model of several target languages needs
``--target-lang`` (e.g. ``fr``): its tag (``>>fr<<``) is put before every source for you; an imported model
with language codes (M2M-100, NLLB) reads ``--source-lang``'s code before the source (default: the checkpoint's
first source language) and writes the target's first, which is left out of the output. Input is
UTF-8 (a BOM and ``\\r\\n`` line ends are accepted); ``--output`` is written only when every line was
translated.
"""

from __future__ import annotations

import argparse
import contextlib
import sys
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, TextIO

from mt.cli.errors import run_command
from mt.cli.flags import add_decode_args, add_model_args, add_version_flag, add_workers_flag, decode_config
from mt.cli.output import atomic_output, check_input_file, check_output_file
from mt.errors import UserError
from mt.runs import experiment_checkpoints, experiment_dir

if TYPE_CHECKING:  # torch and the model load only once the flags are parsed: usage errors and --help are instant
    from mt.config import Config, DecodeConfig
    from mt.decode import Translation, Translator


DOCUMENT_FORMATS = ("text", "html", "markdown", "srt", "docx", "odt", "pptx")  # mt.document.formats' names
BINARY_FORMATS = ("docx", "odt", "pptx")
LINE_SUFFIXES = (".txt", ".gz")  # read as lines unless --format says otherwise: line N out for line N in


def checkpoint_paths(args: argparse.Namespace) -> list[Path]:
    """``--ckpt`` (several: an ensemble), or what the experiment's run left (its best checkpoint, or its
    members: ``mt.runs``); a clear error for one that is missing or a directory."""
    given = args.ckpt if isinstance(args.ckpt, list) else [args.ckpt] if args.ckpt is not None else None
    paths = given if given is not None else experiment_checkpoints(experiment_dir(args.exp))
    for path in paths:
        if path.is_dir():
            inside = [p for p in (path / "best.pt", path / "checkpoints" / "best.pt") if p.is_file()]
            hint = f", e.g. {inside[0]}" if inside else ""
            raise UserError(f"checkpoint {path} is a directory; give a checkpoint file{hint}")
        if not path.exists():
            how = f" (train it with `make train EXP={args.exp}`, or pass --ckpt FILE)" if given is None else ""
            raise UserError(f"checkpoint not found: {path}{how}")
    return paths


def load_translator(args: argparse.Namespace) -> tuple[Translator, Config, list[Path]]:
    """Load the checkpoint(s) named by ``args`` (several: one ensemble) and wrap them in a Translator with the
    merged settings (the first checkpoint's, and the flags)."""
    paths = checkpoint_paths(args)  # before importing torch: a wrong path fails at once
    import torch

    from mt.allocator import keep_freed_memory
    from mt.checkpoint import load_models_for_inference
    from mt.config import validate_group
    from mt.decode import Translator
    from mt.device import resolve_device

    device = resolve_device(args.device, key="--device")
    check_precision(args.precision, device)
    workers = getattr(args, "workers", 1)
    if workers > 1:
        return load_translator_processes(args, paths, device, workers)
    if args.threads > 0:
        torch.set_num_threads(args.threads)
    keep_freed_memory()  # the step's logits and caches are reused, not page-faulted in again every step
    model, tokenizers, cfg = load_models_for_inference(paths, device, pack=True, precision=args.precision,
                                                       native=args.native == "on")
    decode = validate_group("decode", decode_config(cfg.decode, args))
    translator = Translator(model, tokenizers, decode, device, max_positions=cfg.model.max_positions,
                            source_lang=default_source(cfg, args))
    return translator, cfg, paths


def default_source(cfg: Config, args: argparse.Namespace) -> str:
    """The source language a Translator is given (the code a model with language codes reads first): the
    command's ``--source-lang`` (mt-eval: its ``--pair``'s source), else the checkpoint's first source language."""
    from mt.data.languages import parse_pair, source_languages

    pair = getattr(args, "pair", None)
    return getattr(args, "source_lang", None) or (pair and parse_pair(pair).src) or source_languages(cfg.data)[0]


def oversubscribed(workers: int, threads: int, cores: int) -> str | None:
    """What to tell a user whose ``--workers`` x ``--threads`` exceed the cores, else None: torch threads that
    share a core wait at every barrier (the Multi30k mini with 2 x 2 threads on 2 cores: 4.9x the time)."""
    if workers * threads <= cores:
        return None
    return (f"--workers {workers} x --threads {threads} = {workers * threads} torch threads on {cores} cores "
            f"decode several times slower; leave --threads out (it is then {max(1, cores // workers)})")


def load_translator_processes(
    args: argparse.Namespace, paths: list[Path], device, workers: int
) -> tuple[Translator, Config, list[Path]]:
    """``--workers N``: N decoding processes, each loading the model on ``--threads`` threads (default: this
    process's cores / N); this process keeps only the tokenizers, encodes the lines and gathers the output."""
    import functools

    from mt.checkpoint import load_tokenizers_and_config
    from mt.config import validate_group
    from mt.decode import Translator
    from mt.decode.processes import DecodingProcesses, usable_cores

    if device.type != "cpu":
        raise UserError(f"--workers {workers} runs decoding processes on the CPU, not {device}; use --workers 1")
    tokenizers, cfg = load_tokenizers_and_config(paths[0])
    decode = validate_group("decode", decode_config(cfg.decode, args))
    threads = args.threads if args.threads > 0 else max(1, usable_cores() // workers)
    warning = oversubscribed(workers, threads, usable_cores())
    if warning:
        print(f"mt-translate: warning: {warning}", file=sys.stderr)
    build = functools.partial(worker_translator, [str(path) for path in paths], args.precision, decode,
                              args.native == "on")
    processes = DecodingProcesses(build, workers, threads).start()
    translator = Translator(None, tokenizers, decode, device, max_positions=cfg.model.max_positions,
                            processes=processes, source_lang=default_source(cfg, args))
    return translator, cfg, paths


def worker_translator(paths: list[str], precision: str, decode: DecodeConfig, native: bool = True) -> Translator:
    """What each ``--workers`` process builds: the packed CPU model (or ensemble) and a Translator (module
    level: a spawned process finds it by name)."""
    from mt.allocator import keep_freed_memory
    from mt.checkpoint import load_models_for_inference
    from mt.decode import Translator

    keep_freed_memory()
    model, tokenizers, cfg = load_models_for_inference(paths, "cpu", pack=True, precision=precision, native=native)
    return Translator(model, tokenizers, decode, "cpu", max_positions=cfg.model.max_positions)


def check_precision(precision: str, device) -> None:
    """``--precision bf16`` needs a CPU with bf16 instructions, ``int8`` torch's x86 int8 kernels (UserError
    otherwise); both decode on a CPU only."""
    from mt.errors import UserError
    from mt.model import bf16_supported, int8_supported

    if precision == "fp32":
        return
    if device.type != "cpu":
        raise UserError(f"--precision {precision} is for decoding on a CPU, not {device}")
    if precision == "int8" and not int8_supported():
        raise UserError(
            "--precision int8 needs torch's fbgemm int8 kernels (an x86 build of torch); use --precision fp32"
        )
    if precision == "bf16" and not bf16_supported():
        raise UserError(
            "--precision bf16 needs a CPU with bf16 instructions (AVX512-BF16 or AMX); use --precision fp32"
        )


def target_language(cfg: Config, asked: str | None) -> str | None:
    """``--target-lang`` checked against the model's: the tag language to ask for, None for a one-target model."""
    from mt.data.languages import check_target

    return check_target(cfg.data, asked)


def source_language(cfg: Config, asked: str | None) -> str:
    """``--source-lang`` checked against the model's source languages, else the checkpoint's ``data.src_lang``: the
    language documents are split into sentences by (the Translator's, ``default_source``, is the same for an
    imported model with language codes)."""
    from mt.data.languages import LanguageError, source_languages

    sources = source_languages(cfg.data)
    if asked is not None and asked not in sources:
        have = ", ".join(sources[:12]) + (f" and {len(sources) - 12} more" if len(sources) > 12 else "")
        raise LanguageError(f"source language {asked!r} is not one of this model's: {have}")
    return asked or cfg.data.src_lang


def check_lengths(
    translator: Translator, lines: Sequence[str], name: str, first: int = 1, target: str | None = None
) -> None:
    """With ``on_too_long=reject``: a DataError naming ``name:line`` of the first source that is too long
    (a target-language tag counts)."""
    from mt.data import DataError

    limit = translator.max_src_len
    if translator.cfg.on_too_long != "reject" or limit is None:
        return
    tag = len(translator.target_tag(target))
    for number, line in enumerate(lines, start=first):
        pieces = tag + len(translator.tokenizers.src.encode(line)) if line.strip() else 0
        if pieces > limit:
            raise DataError(
                f"{name}:{number}: {pieces} source pieces, more than the model's {limit} (--on-too-long reject); "
                "shorten the line or use --on-too-long truncate"
            )


def one_line(text: str) -> str:
    """``text`` with CR/LF replaced by spaces: output line N must stay the translation of input line N."""
    return text.replace("\r", " ").replace("\n", " ")


def format_output(translation: Translation, line: int, nbest: int) -> str:
    """The best hypothesis, or with ``nbest > 1`` its n-best as ``LINE ||| text ||| score`` lines."""
    if nbest <= 1:
        return one_line(translation.text) + "\n"
    pairs = zip(translation.texts, translation.hypotheses, strict=True)
    return "".join(f"{line} ||| {one_line(text)} ||| {hyp.score:.4f}\n" for text, hyp in pairs)


def output_nbest(translator: Translator) -> int:
    return translator.cfg.nbest if translator.cfg.strategy == "beam" else 1


def write_all(
    translator: Translator, lines: Sequence[str], out: TextIO, progress: bool, target: str | None = None
) -> None:
    nbest = output_nbest(translator)
    translations = translator.translate_nbest(lines, progress=progress, target_lang=target, scores=nbest > 1)
    for number, translation in enumerate(translations, start=1):
        out.write(format_output(translation, number, nbest))


def interactive(translator: Translator, lines: Iterable[str], out: TextIO, target: str | None = None) -> None:
    """Translate each line as it is typed (Ctrl-D ends)."""
    nbest = output_nbest(translator)
    for number, line in enumerate(lines, start=1):
        check_lengths(translator, [line], "<stdin>", first=number, target=target)
        translation = translator.translate_nbest([line], target_lang=target, scores=nbest > 1)[0]
        out.write(format_output(translation, number, nbest))
        out.flush()


def read_input(path: Path | None) -> tuple[list[str], str]:
    """The input lines and the name errors give them (the file, or ``<stdin>``)."""
    if path is None:
        from mt.data import read_stream

        return list(read_stream(sys.stdin.buffer, "<stdin>")), "<stdin>"
    from mt.data import read_lines

    return list(read_lines(path)), str(path)


def translate(args: argparse.Namespace) -> None:
    """The command: check the paths, load the model, translate the input into the output."""
    if args.input is not None:
        check_input_file(args.input, "--input")
    if args.output is not None:
        check_output_file(args.output, "--output")
    translator, cfg, paths = load_translator(args)
    with contextlib.closing(translator):
        translate_with(translator, cfg, paths, args)


def translate_with(translator: Translator, cfg: Config, paths: list[Path], args: argparse.Namespace) -> None:
    target = target_language(cfg, args.target_lang)
    source = source_language(cfg, args.source_lang)
    into = (f", from {source}" if args.source_lang else "") + (f", into {target}" if target is not None else "")
    processes = translator.processes
    split = f" in {processes.workers} processes of {processes.threads} threads" if processes is not None else ""
    models = str(paths[0]) if len(paths) == 1 else f"an ensemble of {len(paths)} ({', '.join(map(str, paths))})"
    print(f"mt-translate: {models} on {translator.device}{split}{into}, {translator.cfg}", file=sys.stderr)
    if args.input is None and sys.stdin.isatty():
        from mt.data import read_stream

        print("type a sentence per line (Ctrl-D to quit)", file=sys.stderr)
        with atomic_output(args.output) as out:
            interactive(translator, read_stream(sys.stdin.buffer, "<stdin>"), out, target)
        return
    document_format = input_format(args)
    if document_format is not None:
        translate_file(translator, source, args, document_format, target)
        return
    lines, name = read_input(args.input)
    if args.split_sentences == "on":
        lines = split_lines_into_sentences(translator, source, lines, target, progress=args.input is not None)
        with atomic_output(args.output) as out:
            out.writelines(one_line(line) + "\n" for line in lines)
        return
    check_lengths(translator, lines, name, target=target)
    with atomic_output(args.output) as out:
        write_all(translator, lines, out, progress=args.input is not None, target=target)


def input_format(args: argparse.Namespace):
    """The document format to read ``--input`` with (``--format``, or its extension), or None for lines."""
    from mt.document.formats import format_for, formats

    if args.format == "lines" or (args.format == "auto" and args.input is None):
        return None
    if args.format != "auto":
        return formats()[args.format]
    if args.input.suffix.lower() in LINE_SUFFIXES:
        return None  # plain text stays one sentence a line, as always (--format text reads it as a document)
    try:
        return format_for(args.input.name)
    except UserError:
        return None  # not a document's extension (my.en): one sentence a line, as always


def translate_file(translator: Translator, source: str, args: argparse.Namespace, document_format,
                   target: str | None) -> None:
    """``--input`` read as a document, translated sentence by sentence, written back in its format."""
    from mt.cli.documents import translate_document
    from mt.cli.output import atomic_binary_output

    if args.input is None:
        data, name = sys.stdin.buffer.read(), "<stdin>"
    else:
        data, name = args.input.read_bytes(), str(args.input)
    if args.output is None and document_format.name in BINARY_FORMATS and sys.stdout.isatty():
        raise UserError(f"a {document_format.name} file is binary: give --output FILE")
    document = document_format.read(data, name)
    translated = translate_document(translator, document, source, target,
                                    progress=args.input is not None, split=args.split_sentences != "off")
    with atomic_binary_output(args.output) as out:
        out.write(translated)


def split_lines_into_sentences(translator: Translator, source: str, lines: Sequence[str], target: str | None,
                               progress: bool) -> list[str]:
    """``--split-sentences on`` for lines: each line's sentences translated and joined into its line again."""
    from mt.cli.documents import plan_document, translate_plan
    from mt.document.model import Unit
    from mt.document.plain import TextDocument

    document = TextDocument([Unit(line) for line in lines])
    plan = plan_document(translator, document, source, target)
    return [unit.text for unit in plan.assemble(translate_plan(translator, plan, target, progress))]


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="mt-translate", description=__doc__.split("\n\n")[0])
    add_version_flag(parser)
    add_model_args(parser, ensemble=True)
    parser.add_argument("--input", type=Path,
                        help="input file: lines (plain, .txt or .gz), or a document (.html .md .srt .docx .odt "
                             ".pptx, by its extension; --format text for paragraphs of plain text) (default: stdin, "
                             "lines)")
    parser.add_argument("--output", type=Path, help="output file (default: stdout)")
    parser.add_argument("--format", choices=("auto", "lines", *DOCUMENT_FORMATS), default="auto",
                        help="how to read the input: auto (a document by its extension, else lines), lines (one "
                             "sentence a line, line N out for line N in), or a document format")
    parser.add_argument("--split-sentences", choices=("auto", "on", "off"), default="auto",
                        help="split text into sentences before translating: auto (on for documents, off for "
                             "lines, the line-aligned behaviour mt-eval and scoring rely on); on for lines keeps "
                             "each line's sentences on its line")
    parser.add_argument("--target-lang", metavar="LANG",
                        help="target language of a model with several (e.g. fr; required for one); "
                             "a one-target model accepts only its own")
    parser.add_argument("--source-lang", metavar="LANG",
                        help="source language, one of the model's (default: the checkpoint's): the code an "
                             "imported model with language codes (M2M-100, NLLB) reads first; how documents are "
                             "split into sentences")
    add_workers_flag(parser)
    add_decode_args(parser)
    return parser.parse_args(argv)


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    return run_command("mt-translate", lambda: translate(args), args.debug)


if __name__ == "__main__":
    sys.exit(main())
