"""An imported vocabulary in mt's id order: ``<pad> <unk> <s> </s>`` first, then the rest as the source had it.

mt's special ids are fixed (``PAD=0 UNK=1 BOS=2 EOS=3``, ``mt.data.tokenizer``); Marian puts ``</s>`` at 0 and
``<pad>`` last, fairseq's dictionaries ``<s> <pad> </s> <unk>`` first. The import permutes the embedding rows
(and the logits bias) by ``order``: mt id ``i`` holds the source's row ``order[i]``. mt starts decoding from
``<s>``; a family that starts from another token (Marian: ``<pad>``, M2M-100: ``</s>``) gets that token's row
copied into ``<s>``, and the copy's logit is masked (``-inf`` bias), so every source row is scored once.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from mt.data.tokenizer import BOS_ID
from mt.pretrained.files import PretrainedError

SPECIALS = ["<pad>", "<unk>", "<s>", "</s>"]


@dataclass(frozen=True)
class Reordered:
    """``pieces``: mt id -> piece; ``order``: mt id -> source row (``len(order)`` = the embedding's rows, pieces
    first, then the source's rows past its vocabulary); ``masked``: mt ids whose logit is ``-inf``."""

    pieces: list[str]
    order: list[int]
    masked: list[int]


def reorder(pieces: Sequence[str], rows: int, *, pad: int, unk: int, eos: int, start: int, origin: str) -> Reordered:
    """mt's order of a vocabulary ``pieces`` (source id -> piece) over an embedding of ``rows`` rows."""
    for name, i in (("pad", pad), ("unk", unk), ("eos", eos), ("decoder start", start)):
        if not 0 <= i < len(pieces):
            raise PretrainedError(f"{origin}: the {name} id {i} is not in the vocabulary of {len(pieces)} pieces")
    if rows < len(pieces):
        raise PretrainedError(f"{origin}: {len(pieces)} pieces but only {rows} embedding rows")
    copied = start in (pad, unk, eos)
    first = [pad, unk, start, eos]
    rest = [i for i in range(len(pieces)) if i not in first]
    names = [*SPECIALS, *(pieces[i] for i in rest)]
    if len(set(names)) != len(names):
        clash = sorted({n for n in names if names.count(n) > 1})
        raise PretrainedError(f"{origin}: the vocabulary holds {', '.join(clash)} as an ordinary piece, which mt "
                              "reserves for its special ids")
    return Reordered(names, first + rest + list(range(len(pieces), rows)), [BOS_ID] if copied else [])
