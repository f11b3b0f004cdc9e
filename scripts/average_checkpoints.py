"""Average the weights of the last N checkpoints of a run (the paper averages the last 5 / 20).

    python scripts/average_checkpoints.py runs/multi30k_en_de/checkpoints --last 5 [--output averaged.pt]
"""

from __future__ import annotations

import argparse
from pathlib import Path

from mt.checkpoint import average_checkpoints, list_checkpoints, save_checkpoint


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("checkpoint_dir", type=Path)
    parser.add_argument("--last", type=int, default=5, help="how many of the newest checkpoints")
    parser.add_argument("--output", type=Path, default=None, help="default: <checkpoint_dir>/averaged.pt")
    args = parser.parse_args()
    found = [p for _, p in list_checkpoints(args.checkpoint_dir)][-args.last :]
    if not found:
        raise SystemExit(f"no checkpoint_<step>.pt files in {args.checkpoint_dir}")
    output = args.output or args.checkpoint_dir / "averaged.pt"
    save_checkpoint(output, average_checkpoints(found))
    print(f"averaged {len(found)} checkpoints ({', '.join(p.name for p in found)}) -> {output}")


if __name__ == "__main__":
    main()
