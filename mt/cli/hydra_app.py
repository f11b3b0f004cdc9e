"""Run a Hydra job with the error path of ``mt.cli.errors``: one line per error, no traceback.

Hydra catches every exception of a job and prints it with a traceback (or, for its own composition
errors, a message of several lines). So errors are handled before Hydra sees them, in two places:

1. Before Hydra starts, the config is composed with ``hydra.compose`` from the same overrides and
   turned into the typed ``Config``: a bad override (unknown key, wrong type, missing option, syntax)
   becomes a ``UsageError`` naming ``key=value`` (exit 2), a ``ConfigError`` is reported as it is
   (exit 1), and nothing has been written yet. Skipped for ``--multirun`` (sweeps are composed per
   job), shell completion and another config directory; there Hydra's own messages stand.
2. Inside the job, ``run_command`` catches expected errors, prints them and raises ``SystemExit``,
   which Hydra lets through. A run directory that Hydra created for this job and that holds only
   Hydra's bookkeeping (``.hydra/``, the job log) is removed again, so a failed start leaves nothing.

``hydra.main`` still parses the command line, so overrides, ``--help``, ``--cfg job``, ``-m`` and
``hydra.run.dir`` behave as in any Hydra app. ``--debug`` (or ``MT_DEBUG=1``) shows tracebacks;
``--version`` prints the program and mt's version.
"""

from __future__ import annotations

import argparse
import functools
import re
import shutil
import sys
from collections.abc import Callable, Sequence
from pathlib import Path

from omegaconf import DictConfig

from mt.cli.errors import UsageError, pop_debug_flag, run_command
from mt.cli.output import check_output_dir


def _override_key(override: str) -> str:
    return override.lstrip("+~").split("=", 1)[0].split("@", 1)[0]


def _find_override(overrides: Sequence[str], key: str, value: str | None = None) -> str:
    """The override that set ``key`` (to ``value`` if given), the last one if several did, or ``key`` itself."""
    found = [o for o in overrides if _override_key(o) == key]
    with_value = [o for o in found if value is not None and o.split("=", 1)[-1] == value]
    return (with_value or found or [key])[-1]


def override_error_message(error: Exception, overrides: Sequence[str], prog: str) -> str:
    """One or two lines for a Hydra/OmegaConf composition error, naming the override at fault."""
    from hydra.errors import MissingConfigException, OverrideParseException
    from omegaconf.errors import ConfigAttributeError, ConfigKeyError, OmegaConfBaseException

    if isinstance(error, OverrideParseException):
        reason = error.message.splitlines()[0]
        return f"cannot parse the override '{error.override}': {reason} (see `{prog} --help`)"
    if isinstance(error, MissingConfigException) and error.missing_cfg_file and error.options is not None:
        group, _, option = error.missing_cfg_file.rpartition("/")
        options = [o for o in error.options if not o.startswith("base_")]  # base_*: the schemas
        where = _find_override(overrides, group, option)
        return f"{where}: no config '{error.missing_cfg_file}'; available {group} configs: {', '.join(options)}"
    cause = error if isinstance(error, OmegaConfBaseException) else error.__cause__
    if isinstance(cause, OmegaConfBaseException) and cause.full_key:
        reason = str(cause.msg or cause).splitlines()[0]
        if isinstance(cause, ConfigAttributeError | ConfigKeyError):
            reason = f"unknown key ({reason}); `{prog} --cfg job` shows every key"
        merging = re.match(r"Error merging override (\S+)", str(error))  # Hydra names the override it applied
        return f"{merging.group(1) if merging else _find_override(overrides, cause.full_key)}: {reason}"
    lines = [line.strip() for line in str(error).splitlines() if line.strip() and "HYDRA_FULL_ERROR" not in line]
    return "; ".join(lines[:2]) or type(error).__name__


def check_composition(
    args: argparse.Namespace, config_dir: str, config_name: str, prog: str
) -> tuple[Path, Path] | None:
    """Compose the config as Hydra will and build the typed ``Config`` (see the module doc).

    Returns (the run directory, the topmost directory the job will create) when the run directory does
    not exist yet, else None.
    """
    from hydra import compose, initialize_config_dir
    from hydra.errors import HydraException
    from omegaconf import OmegaConf, open_dict
    from omegaconf.errors import OmegaConfBaseException

    from mt.config import register_configs, to_config

    if args.multirun or args.shell_completion or args.experimental_rerun or args.config_dir or args.config_path:
        return None
    show_only = bool(args.help or args.hydra_help or args.cfg or args.info)  # keep showing invalid configs
    register_configs()
    try:
        with initialize_config_dir(config_dir=config_dir, version_base="1.3"):
            cfg = compose(args.config_name or config_name, overrides=list(args.overrides), return_hydra_config=True)
        run_dir = OmegaConf.select(cfg, "hydra.run.dir", throw_on_resolution_failure=False)
        with open_dict(cfg):
            del cfg["hydra"]
        typed = None if show_only else to_config(cfg)
    except (HydraException, OmegaConfBaseException) as e:
        raise UsageError(override_error_message(e, args.overrides, prog)) from e
    if typed is None or run_dir is None:
        return None
    run_dir = Path(run_dir)
    label = "train.run_dir" if run_dir == Path(typed.train.run_dir) else "hydra.run.dir"
    check_output_dir(run_dir, label)
    if run_dir.exists():
        return None
    missing = run_dir.absolute()
    while not missing.parent.exists():  # the topmost directory the job will create (runs/ for runs/demo)
        missing = missing.parent
    return run_dir.absolute(), missing


def remove_bookkeeping_only(run_dir: Path, created: Path) -> None:
    """Delete ``run_dir`` if it holds nothing but Hydra's output subdir and ``*.log`` files, and the
    then empty directories above it up to ``created``, the topmost one this job made."""
    from hydra.core.hydra_config import HydraConfig

    subdir = HydraConfig.get().output_subdir
    if not run_dir.is_dir():
        return
    if all(p.name == subdir or (p.suffix == ".log" and p.is_file()) for p in run_dir.iterdir()):
        shutil.rmtree(run_dir, ignore_errors=True)
        for parent in run_dir.parents:
            if not parent.is_relative_to(created) or not parent.is_dir() or any(parent.iterdir()):
                return
            parent.rmdir()


def run_hydra_job(
    prog: str, job: Callable[[DictConfig], object], config_dir: str, config_name: str
) -> int:
    """Run ``job`` as a Hydra app over ``sys.argv`` with the error path above; the exit status."""
    from hydra import main as hydra_main
    from hydra._internal.utils import get_args_parser

    argv, debug = pop_debug_flag(sys.argv[1:])
    if "--version" in argv:  # Hydra's parser has no --version; answered before any config is composed
        from mt import __version__

        print(f"{prog} {__version__}")
        return 0
    sys.argv[1:] = argv  # hydra.main parses sys.argv itself
    args = get_args_parser().parse_args(argv)
    new_run_dir: tuple[Path, Path] | None = None  # (run dir, the topmost directory the job creates)

    def check() -> None:
        nonlocal new_run_dir
        new_run_dir = check_composition(args, config_dir, config_name, prog)

    status = run_command(prog, check, debug)
    if status:
        return status

    @functools.wraps(job)  # Hydra names the task (and its log file) after the wrapped function's module
    def task(dcfg: DictConfig) -> None:
        def run_job() -> None:
            job(dcfg)

        status = run_command(prog, run_job, debug)
        if status:
            if new_run_dir is not None:
                remove_bookkeeping_only(*new_run_dir)
            raise SystemExit(status)  # not an Exception: Hydra lets it through without a traceback

    hydra_main(config_path=config_dir, config_name=config_name, version_base="1.3")(task)()
    return 0
