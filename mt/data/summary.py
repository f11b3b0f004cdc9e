"""The table ``prepare_data`` prints: per split pairs, tokens, lengths and dropped pairs."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

if TYPE_CHECKING:
    from mt.data.binarize import TokenizedSplit
    from mt.data.tokenizer import Tokenizers


def format_summary(
    tokenizers: Tokenizers,
    splits: dict[str, TokenizedSplit],
    stats: dict[str, dict[str, Any]],
    reused: Sequence[str],
    root: Path,
    language_pairs: Sequence[str] = (),
) -> str:
    """A table: per split pairs, tokens, mean/max lengths per side, dropped pairs per reason; with several
    ``language_pairs`` (their names, in ``data_pairs`` order) a last line counts each one's examples per split."""
    kind = "joint" if tokenizers.joint else "separate"
    vocab = (
        f"{tokenizers.src.vocab_size}"
        if tokenizers.joint
        else f"{tokenizers.src.vocab_size}/{tokenizers.tgt.vocab_size}"
    )
    lines = [
        f"data: {kind} BPE vocab {vocab} (cache {root})",
        f"  {'split':<6} {'pairs':>9} {'src tok':>11} {'tgt tok':>11} {'src mean/max':>13} "
        f"{'tgt mean/max':>13}  dropped",
    ]
    for name, split in splits.items():
        src, tgt = split.src_lens.double(), split.tgt_lens.double()
        n = max(len(split), 1)
        dropped = stats[name]["dropped"]
        drop = (
            f"{sum(dropped.values())} ({', '.join(f'{k} {v}' for k, v in dropped.items())})" if name == "train" else "-"
        )
        cached = " (cached)" if name in reused else ""
        lines.append(
            f"  {name:<6} {len(split):>9} {int(src.sum()):>11} {int(tgt.sum()):>11} "
            f"{float(src.sum()) / n:>8.1f}/{int(src.max()) if len(split) else 0:<4} "
            f"{float(tgt.sum()) / n:>8.1f}/{int(tgt.max()) if len(split) else 0:<4}  {drop}{cached}"
        )
    if len(language_pairs) > 1:
        counts = {name: np.bincount(split.pairs, minlength=len(language_pairs)) for name, split in splits.items()}
        per_pair = ", ".join(
            f"{pair} {'/'.join(str(int(c[i])) for c in counts.values())}" for i, pair in enumerate(language_pairs)
        )
        lines.append(f"  language pairs ({'/'.join(splits)} examples): {per_pair}")
    return "\n".join(lines)
