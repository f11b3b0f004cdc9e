"""mt-serve's model list: from repeated ``--ckpt`` / ``--ct2`` flags, or a ``--models`` TOML file.

A models file (one ``[[model]]`` table per model, served in the file's order, which breaks routing ties)::

    [[model]]
    name = "en-de"                      # optional: default <source>-<targets>, e.g. en-de or en-de+fr
    ckpt = "runs/en_de/checkpoints/best.pt"   # or a list: one ensemble; or ct2 = "exports/en-de-ct2"
    precision = "fp32"                  # fp32 | bf16 | int8 (checkpoints only; default: --precision)
    source_lang = "en"                  # optional: rename the model's source / its one target language
    target_lang = "de"

A model with language codes (an imported M2M-100 or NLLB-200) translates between any two of its languages, served
under LibreTranslate's codes (``mt.serve.language_codes``) and named by its file (``nllb-200.pt``: ``nllb-200``);
``source_lang`` then picks its default source (by either code) and ``target_lang`` must be one of its languages.

Relative paths are read from the file's directory. Every spec is checked when the list is read (files
there, languages known), so a wrong entry fails at start (or leaves a SIGHUP reload undone), naming it.
"""

from __future__ import annotations

import argparse
import dataclasses
import threading
import tomllib
from pathlib import Path
from typing import Any

from mt.cli.errors import UsageError
from mt.errors import UserError
from mt.serve.models import ModelSpec
from mt.serve.routing import Languages, model_name

ENTRY_KEYS = {"name", "ckpt", "ct2", "precision", "source_lang", "target_lang"}
PRECISIONS = ("fp32", "bf16", "int8")


def model_specs(args: argparse.Namespace) -> list[ModelSpec]:
    """The models the flags name: ``--models FILE``, else each ``--ckpt`` / ``--ct2`` in order, else ``--exp``'s."""
    flags = getattr(args, "model_flags", None) or []
    if args.models is not None:
        if flags:
            raise UsageError("give --models or --ckpt/--ct2, not both")
        return read_models_file(args.models, args)
    if len(flags) > 1 and (args.source_lang or args.target_lang):
        raise UsageError("--source-lang/--target-lang rename one model's languages; with several, give each its "
                         "own in a --models file")
    if not flags:
        flags = [("ckpt", None)]  # --exp's checkpoint
    entries = [{"ckpt": values} if kind == "ckpt" else {"ct2": values} for kind, values in flags]
    for entry in entries:
        entry.update(source_lang=args.source_lang, target_lang=args.target_lang)
    return named([spec_of(entry, args, where=flag_name(entry)) for entry in entries])


def flag_name(entry: dict[str, Any]) -> str:
    return "--ct2" if "ct2" in entry else "--ckpt"


def read_models_file(path: Path, args: argparse.Namespace) -> list[ModelSpec]:
    """The ``[[model]]`` entries of ``path`` as specs (see the module docstring); a UserError names a bad one."""
    try:
        table = tomllib.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise UserError(f"--models {path}: no such file") from None
    except (tomllib.TOMLDecodeError, UnicodeDecodeError) as e:
        raise UserError(f"--models {path}: {e}") from None
    entries = table.get("model")
    if not isinstance(entries, list) or not entries or not all(isinstance(e, dict) for e in entries):
        raise UserError(f"--models {path}: no [[model]] entries")
    specs = []
    for number, entry in enumerate(entries, start=1):
        where = f"--models {path}: model {number}"
        unknown = sorted(set(entry) - ENTRY_KEYS)
        if unknown:
            raise UserError(f"{where}: unknown key {unknown[0]} (known: {', '.join(sorted(ENTRY_KEYS))})")
        if ("ckpt" in entry) == ("ct2" in entry):
            raise UserError(f"{where}: give ckpt (a path or a list: an ensemble) or ct2 (a directory), one of them")
        specs.append(spec_of(resolved(entry, path.parent), args, where))
    return named(specs)


def resolved(entry: dict[str, Any], base: Path) -> dict[str, Any]:
    """The entry with its paths read from ``base`` (the models file's directory)."""
    out = dict(entry)
    if "ct2" in entry:
        out["ct2"] = base / str(entry["ct2"])
    else:
        given = entry["ckpt"] if isinstance(entry["ckpt"], list) else [entry["ckpt"]]
        out["ckpt"] = [base / str(p) for p in given]
    return out


def spec_of(entry: dict[str, Any], args: argparse.Namespace, where: str) -> ModelSpec:
    """One model's spec: its languages read now (tokenizers and config only), its engine built by ``load``."""
    precision = entry.get("precision") or args.precision
    if precision not in PRECISIONS:
        raise UserError(f"{where}: precision {precision} (one of {', '.join(PRECISIONS)})")
    source_lang, target_lang = entry.get("source_lang"), entry.get("target_lang")
    if entry.get("ct2") is not None:
        return ct2_spec(Path(entry["ct2"]), args, source_lang, target_lang, entry.get("name"))
    local = argparse.Namespace(**{**vars(args), "ckpt": entry["ckpt"], "precision": precision,
                                  "source_lang": source_lang, "target_lang": target_lang})
    return checkpoint_spec(local, entry.get("name"))


def checkpoint_spec(args: argparse.Namespace, name: str | None) -> ModelSpec:
    from mt.checkpoint import load_tokenizers_and_config
    from mt.cli.serve import served_languages
    from mt.cli.translate import checkpoint_paths

    paths = checkpoint_paths(args)
    tokenizers, cfg = load_tokenizers_and_config(paths[0])
    if tokenizers.src.language_codes:
        languages = coded_model_languages(cfg, args, name or paths[0].stem)
        # the Translator's default source is the model's own code of the default source
        args = argparse.Namespace(**{**vars(args), "source_lang": languages.own_code(languages.source)})
    else:
        source, targets, tagged = served_languages(cfg, args)
        languages = Languages(name or model_name(source, targets), source, tuple(targets), tagged)
    identity = ("mt", tuple(str(p.resolve()) for p in paths), tuple(p.stat().st_mtime_ns for p in paths),
                args.precision, languages.source, languages.targets)
    return ModelSpec(languages, lambda: load_checkpoint_engine(args, languages), identity, "mt",
                     " + ".join(map(str, paths)))


def coded_model_languages(cfg, args: argparse.Namespace, name: str) -> Languages:
    """A model with language codes (M2M-100, NLLB) serves every pair of its languages under LibreTranslate's codes
    (``mt.serve.language_codes``); ``--source-lang`` (either code) picks the default source, ``--target-lang`` must
    be one of its languages (neither renames one)."""
    from mt.data.languages import source_languages, target_languages
    from mt.serve.language_codes import coded_languages

    languages = coded_languages(name, source_languages(cfg.data), target_languages(cfg.data), args.source_lang)
    target = args.target_lang
    if target is not None and target not in languages.targets and target not in dict(languages.codes).values():
        raise UserError(f"target language {target!r} is not one of this model's: {', '.join(languages.targets)}")
    return languages


def load_checkpoint_engine(args: argparse.Namespace, languages: Languages):
    """The checkpoint's TorchEngine. On the main thread (at start) it loads on one torch thread: a thread that
    ran a parallel (OpenMP) region leaves its thread team behind, and the decoding worker's own team then
    shares the cores with it (2x slower decoding on 2 cores, measured). On the worker's thread (a lazy load,
    a reload) the worker's thread count stays as it is."""
    import sys

    from mt.cli.translate import load_translator
    from mt.serve.engine import TorchEngine

    threads = 1 if threading.current_thread() is threading.main_thread() else 0
    translator, _, paths = load_translator(argparse.Namespace(**{**vars(args), "threads": threads}))
    print(f"mt-serve: decoding defaults {translator.cfg}", file=sys.stderr)
    models = " + ".join(map(str, paths))  # several: an ensemble
    own = languages.own_code  # the engine reads a model's own codes (NLLB's deu_Latn: mt.serve.language_codes)
    return TorchEngine(translator, own(languages.source), [own(t) for t in languages.targets],
                       f"{models} on {translator.device}", tagged=languages.tagged)


def ct2_spec(directory: Path, args: argparse.Namespace, source_lang: str | None, target_lang: str | None,
             name: str | None) -> ModelSpec:
    from mt.serve.ct2_engine import Ct2Engine

    source, targets, tagged = Ct2Engine.languages(directory, source_lang, target_lang)
    languages = Languages(name or model_name(source, targets), source, tuple(targets), tagged)
    model_file = directory / "model.bin"
    stamp = model_file.stat().st_mtime_ns if model_file.is_file() else 0
    identity = ("ct2", str(directory.resolve()), stamp, source, tuple(targets))
    return ModelSpec(languages, lambda: load_ct2_engine(directory, args, source, target_lang), identity, "ct2",
                     str(directory))


def load_ct2_engine(directory: Path, args: argparse.Namespace, source: str, target_lang: str | None):
    import sys

    from mt.cli.flags import DECODE_FLAGS
    from mt.serve.app import usable_cores
    from mt.serve.ct2_engine import Ct2Engine

    given = {field: getattr(args, flag) for flag, field in DECODE_FLAGS.items() if getattr(args, flag) is not None}
    engine = Ct2Engine.load(directory, given, args.threads or usable_cores(), source, target_lang)
    print(f"mt-serve: decoding defaults {engine.defaults}", file=sys.stderr)
    return engine


def named(specs: list[ModelSpec]) -> list[ModelSpec]:
    """The specs with unique names: a name given twice (two models of one pair) gets ``-2``, ``-3``..."""
    seen: dict[str, int] = {}
    out = []
    for spec in specs:
        name = spec.name
        seen[name] = seen.get(name, 0) + 1
        if seen[name] > 1:
            spec = dataclasses.replace(spec, languages=dataclasses.replace(spec.languages, name=f"{name}-{seen[name]}"))
        out.append(spec)
    return out
