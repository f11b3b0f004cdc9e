"""``mt-plots RUN_DIR`` (``make plots RUN=...``): redraw a run's learning curves as PNG files."""

from __future__ import annotations

import sys
from collections.abc import Sequence
from pathlib import Path


def main(argv: Sequence[str] | None = None) -> int:
    """``mt-plots RUN_DIR`` (``make plots RUN=...``): redraw a run's learning curves."""
    import argparse

    from mt.cli.errors import run_command
    from mt.cli.flags import add_debug_flag, add_version_flag
    from mt.errors import UserError

    parser = argparse.ArgumentParser(prog="mt-plots", description="Redraw a run's learning curves (PNG).")
    parser.add_argument("run_dir", type=Path, help="a run directory holding metrics.jsonl")
    add_version_flag(parser)
    add_debug_flag(parser)
    args = parser.parse_args(argv)

    def plots() -> None:
        from mt.eval.plots import plot_learning_curves

        if not (args.run_dir / "metrics.jsonl").is_file():
            raise UserError(f"{args.run_dir / 'metrics.jsonl'} not found: give a run directory (runs/<name>)")
        for path in plot_learning_curves(args.run_dir):
            print(path)

    return run_command("mt-plots", plots, args.debug)


if __name__ == "__main__":
    sys.exit(main())
