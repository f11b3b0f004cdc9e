"""One model of several target languages against one-pair models: test scores per pair, size, valid curves.

    python scripts/compare_pairs.py --multi runs/multi30k_en_multi \
        --single runs/en_de runs/en_fr runs/en_cs [--plot docs/img/multilingual_valid_bleu.png]

Reads each run's ``test_results.json`` (written by the end of training), ``metrics.jsonl`` (validation
rows) and ``checkpoints/best.pt`` (parameters). A one-pair run is matched to the multilingual model's pair
by its config's languages. Prints a Markdown table: test BLEU / chrF per pair for both, the difference, and
the parameters to deploy (one model against the sum of the one-pair models). The plot puts the valid BLEU of
both on one axis of updates per pair (the multilingual model's updates divided by its number of pairs), so
the curves compare equal compute per pair.
"""

from __future__ import annotations

import argparse
import json
from dataclasses import dataclass
from pathlib import Path

import torch

from mt.checkpoint import load_checkpoint
from mt.config import to_config
from mt.data.languages import data_pairs


@dataclass
class Run:
    """What one training run left behind that the comparison needs."""

    path: Path
    pairs: list[str]
    test: dict
    valid: list[dict]
    parameters: int
    updates: int


def read_run(path: Path) -> Run:
    """A finished run's pairs, test results, validation rows, parameter count and update count."""
    state = load_checkpoint(path / "checkpoints" / "best.pt", map_location="cpu")
    cfg = to_config(state["config"])
    rows = [json.loads(line) for line in (path / "metrics.jsonl").read_text().splitlines() if line.strip()]
    valid = [r for r in rows if r.get("split") == "valid"]
    return Run(
        path=path,
        pairs=[p.name for p in data_pairs(cfg.data)],
        test=json.loads((path / "test_results.json").read_text()),
        valid=valid,
        parameters=sum(v.numel() for v in state["model"].values() if torch.is_tensor(v)),
        updates=max((r["step"] for r in rows if "step" in r), default=0),
    )


def pair_scores(run: Run, pair: str) -> tuple[float, float]:
    """Test (BLEU, chrF) of ``pair`` in ``run``: its own entry in a multi-pair run, the whole run otherwise."""
    if len(run.pairs) > 1:
        return run.test["pairs"][pair]["bleu"], run.test["pairs"][pair]["chrf"]
    return run.test["bleu"], run.test["chrf"]


def table(multi: Run, singles: dict[str, Run]) -> str:
    """The Markdown comparison table, one row per pair of the multilingual model plus a size row."""
    lines = [
        f"| pair | one-pair model ({_updates(singles)} updates each): BLEU / chrF "
        f"| one model ({multi.updates:,} updates): BLEU / chrF | BLEU difference |",
        "| --- | ---: | ---: | ---: |",
    ]
    for pair in multi.pairs:
        m_bleu, m_chrf = pair_scores(multi, pair)
        if pair not in singles:
            lines.append(f"| {pair} | - | {m_bleu:.2f} / {m_chrf:.2f} | - |")
            continue
        s_bleu, s_chrf = pair_scores(singles[pair], pair)
        lines.append(f"| {pair} | {s_bleu:.2f} / {s_chrf:.2f} | {m_bleu:.2f} / {m_chrf:.2f} | {m_bleu - s_bleu:+.2f} |")
    total = sum(r.parameters for r in singles.values())
    lines.append(f"| parameters to deploy | {total:,} ({len(singles)} models) | {multi.parameters:,} | "
                 f"{multi.parameters / total:.2f}× |")
    return "\n".join(lines)


def _updates(singles: dict[str, Run]) -> str:
    counts = sorted({r.updates for r in singles.values()})
    return " / ".join(f"{c:,}" for c in counts)


def plot(multi: Run, singles: dict[str, Run], out: Path) -> None:
    """Valid BLEU per pair against updates per pair: solid the one model, dashed the one-pair models."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    fig = Figure(figsize=(7, 4.2))
    FigureCanvasAgg(fig)
    ax = fig.add_subplot()
    per_pair = len(multi.pairs)
    for i, pair in enumerate(multi.pairs):
        color = f"C{i}"
        steps = [r["step"] / per_pair for r in multi.valid]
        ax.plot(steps, [r[f"bleu_{pair}"] for r in multi.valid], color=color, marker="o", label=f"{pair}, one model")
        if pair in singles:
            s = singles[pair].valid
            ax.plot([r["step"] for r in s], [r["bleu"] for r in s], color=color, linestyle="--", marker="x",
                    label=f"{pair}, its own model")
    ax.set_xlabel("updates per pair (one model: its updates / number of pairs)")
    ax.set_ylabel("valid BLEU (greedy)")
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8)
    fig.tight_layout()
    out.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(out, dpi=110)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--multi", type=Path, required=True, help="run directory of the model of several pairs")
    parser.add_argument("--single", type=Path, nargs="+", required=True, help="run directories of one-pair models")
    parser.add_argument("--plot", type=Path, help="write the valid BLEU curves to this PNG")
    args = parser.parse_args(argv)
    multi = read_run(args.multi)
    singles = {}
    for path in args.single:
        run = read_run(path)
        if len(run.pairs) != 1:
            parser.error(f"{path}: not a one-pair run (pairs {', '.join(run.pairs)})")
        singles[run.pairs[0]] = run
    print(table(multi, singles))
    if args.plot:
        plot(multi, singles, args.plot)
        print(f"plot: {args.plot}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
