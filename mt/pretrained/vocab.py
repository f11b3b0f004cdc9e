"""An imported vocabulary in mt's id order: ``<pad> <unk> <s> </s>`` first, then the rest as the source had it.

mt's special ids are fixed (``PAD=0 UNK=1 BOS=2 EOS=3``, ``mt.data.tokenizer``); Marian puts ``</s>`` at 0 and
``<pad>`` last, fairseq's dictionaries ``<s> <pad> </s> <unk>`` first. The import permutes the embedding rows
(and the logits bias) by ``order``: mt id ``i`` holds the source's row ``order[i]``. mt starts decoding from
``<s>``; a family that starts from another token (Marian: ``<pad>``, M2M-100 and NLLB: ``</s>``) gets that
token's row copied into ``<s>``, and the copy's logit is masked (``-inf`` bias), so every source row is scored once.
A source row named like one of mt's specials that is none of them (fairseq's ``<s>``, id 0, which M2M-100 and NLLB
never start from: an ordinary output row there) keeps its place among the rest under the name ``<s:0>`` (the name
and the source id), as ``renamed`` does.
"""

from __future__ import annotations

from collections import Counter
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
    names = [*SPECIALS, *(renamed(pieces[i], i) for i in rest)]
    if len(set(names)) != len(names):
        clash = sorted(n for n, count in Counter(names).items() if count > 1)
        raise PretrainedError(f"{origin}: the vocabulary holds {', '.join(clash[:5])} more than once (mt numbers "
                              "each piece once)")
    return Reordered(names, first + rest + list(range(len(pieces), rows)), [BOS_ID] if copied else [])


def renamed(piece: str, i: int) -> str:
    """An ordinary row's name: its piece, or for a piece mt reserves for a special id (``<s>``), that name with the
    source id (``<s:0>``), so the row keeps its place and is scored as any other."""
    return f"{piece[:-1]}:{i}>" if piece in SPECIALS else piece
