"""Word alignment of a source sentence and its translation from the model's own cross-attention.

The model reads the source and the translation once more (teacher-forced, batched), and one decoder
layer's encoder-decoder attention, averaged over heads, says which source pieces each target piece looked
at. Pieces are summed into words (runs of non-whitespace, ``WORD``: the words ``mt.document.project``
counts; a target tag and the EOS column left out). Each target word's most attended source word gives one
direction, each source word's most attending target word the other, and the two are joined as statistical
aligners join theirs (``SYMMETRISE``): grow-diag-final-and (Koehn et al. 2005), or their union, or the
target-to-source links alone. The layer and the rest were chosen by tag placement against eflomal on
Multi30k (docs/documents.md): the middle decoder layer (``MIDDLE``: the third of six) places more tags on
exactly the reference's words than the last layer or the mean of all layers, grow-diag-final-and more than
the union; reading the attention of the step after a piece (``shift``, Chen et al. 2020) places few.
"""

from __future__ import annotations

import contextlib
import re
from collections.abc import Iterator, Sequence
from dataclasses import dataclass

import numpy as np
import torch
from torch import Tensor

from mt.data import batch_by_tokens
from mt.decode.common import BOS_ID, EOS_ID, PAD_ID
from mt.model.cache import EncoderOut

WORD = re.compile(r"\S+")
MIDDLE = -100  # as ``layer``: the middle decoder layer, (L - 1) // 2 counted from 0
ALL_LAYERS = 99  # as ``layer``: the mean of every decoder layer's attention
ALIGN_LAYER = MIDDLE
SHIFT = False
SYMMETRISATIONS = ("grow-diag-final-and", "union", "target")
SYMMETRISE = "grow-diag-final-and"
ALIGN_MAX_TOKENS = 8192  # source + target tokens in one teacher-forced batch

Link = tuple[int, int]  # (source word, target word)


@dataclass(frozen=True)
class AlignInput:
    """One sentence pair: the source ids as the model read them (a tag first, if any: ``prefix`` ids) and
    each source piece's word; the target ids as generated and each target piece's word (-1: none)."""

    src_ids: list[int]
    src_words: list[int]
    tgt_ids: list[int]
    tgt_words: list[int]
    prefix: int = 0


class EncoderRows:
    """The encoder outputs decoding computed, one row a sentence by its source ids, so that aligning the
    sentences runs the decoder layers only (the encoder is about half of the teacher-forced pass).

    ``recording(model)`` hears of every ``encode`` while a search runs (``Seq2SeqTransformer.on_encoded``)
    and keeps each row (pieces as decoded, EOS left out); ``align_batch`` reads them and encodes a batch itself
    where a row is missing. One lives as long as one call that aligns (``TorchEngine.translate``)."""

    def __init__(self) -> None:
        self._rows: dict[tuple[int, ...], Tensor] = {}

    @contextlib.contextmanager
    def recording(self, model: torch.nn.Module) -> Iterator[None]:
        aligner = getattr(model, "members", [model])[0]  # an ensemble aligns with its first member
        aligner.on_encoded = self.record
        try:
            yield
        finally:
            aligner.on_encoded = None

    def record(self, src: Tensor, enc: EncoderOut) -> None:
        """Keep each row of ``src`` (B, S: pieces, EOS, padding): ``enc.out`` (S_i, D)."""
        lengths = (~enc.pad_mask).sum(dim=1).tolist()
        for row, (ids, length) in enumerate(zip(src.tolist(), lengths, strict=True)):
            self._rows.setdefault(tuple(ids[: length - 1]), enc.out[row, :length].clone())

    def batch(self, pairs: Sequence[AlignInput]) -> EncoderOut | None:
        """The kept rows of ``pairs`` padded into one encoder output (B, S, D), or None if one is missing."""
        rows = [self._rows.get(tuple(p.src_ids)) for p in pairs]
        if any(r is None for r in rows):
            return None
        width = max(r.size(0) for r in rows)
        out = rows[0].new_zeros(len(rows), width, rows[0].size(1))  # (B, S, D)
        pad_mask = torch.ones(len(rows), width, dtype=torch.bool, device=out.device)  # (B, S)
        for i, r in enumerate(rows):
            out[i, : r.size(0)] = r
            pad_mask[i, : r.size(0)] = False
        return EncoderOut(out, pad_mask)


def piece_words(text: str, spans: Sequence[tuple[int, int]]) -> list[int]:
    """For each piece span of ``text``, the index of the word (``WORD``) it is part of; -1 for whitespace."""
    starts = [m.span() for m in WORD.finditer(text)]
    out, w = [], 0
    for start, end in spans:
        while w < len(starts) and starts[w][1] <= start:
            w += 1
        inside = w < len(starts) and starts[w][0] < end and start < starts[w][1]
        out.append(w if inside else -1)
    return out


def align_batch(model: torch.nn.Module, pairs: Sequence[AlignInput], device: torch.device | str,
                layer: int = ALIGN_LAYER, shift: bool = SHIFT, rows: EncoderRows | None = None) -> list[list[Link]]:
    """Word links of every pair, batched by tokens; an empty source or target has no links. ``rows``: the
    encoder outputs decoding kept (else each batch is encoded here)."""
    links: list[list[Link]] = [[] for _ in pairs]
    todo = [i for i, p in enumerate(pairs) if p.src_ids and p.tgt_ids]
    costs = [len(pairs[i].src_ids) + len(pairs[i].tgt_ids) + 2 for i in todo]
    for batch in batch_by_tokens(costs, ALIGN_MAX_TOKENS, 10_000):
        chosen = [pairs[todo[j]] for j in batch]
        weights = attention(model, chosen, device, layer, rows)  # (B, T+1, S+1)
        for j, pair, w in zip(batch, chosen, weights, strict=True):
            links[todo[j]] = word_links(w, pair, shift)
    return links


@torch.inference_mode()
def attention(model: torch.nn.Module, pairs: Sequence[AlignInput], device: torch.device | str,
              layer: int, rows: EncoderRows | None = None) -> Tensor:
    """Head-averaged cross-attention (B, T+1, S+1) of ``layer`` for teacher-forced ``[BOS] + tgt`` over
    ``src + [EOS]``: row t predicts target piece t (row T predicts EOS). The encoder output comes from
    ``rows`` where it holds every pair's, else from encoding ``src`` here."""
    source = getattr(model, "members", [model])[0]  # an ensemble aligns with its first member
    length = max(len(p.tgt_ids) for p in pairs) + 1
    tgt = torch.full((len(pairs), length), PAD_ID, dtype=torch.long)
    for row, p in enumerate(pairs):
        tgt[row, : len(p.tgt_ids) + 1] = torch.tensor([BOS_ID, *p.tgt_ids])
    tgt = tgt.to(device)
    layers = len(source.decoder.layers)
    if layer == MIDDLE:
        layer = (layers - 1) // 2
    chosen = range(layers) if layer == ALL_LAYERS else [layer if -layers <= layer < layers else -1]
    was_training = source.training
    if was_training:  # (walks every module: not on each batch of a served model, which is always in eval)
        source.eval()
    try:
        kept = rows.batch(pairs) if rows is not None else None
        if kept is None:
            kept = encode_sources(source, pairs, device)
        found = [source.decoder.cross_attention_weights(tgt, kept.out, kept.pad_mask, index).mean(dim=1).float()
                 for index in chosen]
        return (sum(found) / len(found)).cpu()
    finally:
        if was_training:
            source.train()


def encode_sources(model: torch.nn.Module, pairs: Sequence[AlignInput], device: torch.device | str) -> EncoderOut:
    """The encoder output of the pairs' ``src_ids + [EOS]``, right-padded (B, S+1, D)."""
    width = max(len(p.src_ids) for p in pairs) + 1
    src = torch.full((len(pairs), width), PAD_ID, dtype=torch.long)
    for row, p in enumerate(pairs):
        src[row, : len(p.src_ids) + 1] = torch.tensor([*p.src_ids, EOS_ID])
    src = src.to(device)
    return model.encode(src, src == PAD_ID)


def word_links(weights: Tensor, pair: AlignInput, shift: bool) -> list[Link]:
    """Each target word linked to its most attended source word, from one pair's (T+1, S+1) attention.

    Pieces are summed into words by two small products with one-hot matrices (numpy: a pair's matrices are a
    few dozen rows, where a torch call's own cost would dominate)."""
    src_words = np.asarray(pair.src_words[pair.prefix :])  # the tag and EOS columns left out
    tgt_words = np.asarray(pair.tgt_words)
    n_src = int(src_words.max()) + 1 if len(src_words) else 0
    n_tgt = int(tgt_words.max()) + 1 if len(tgt_words) else 0
    if n_src <= 0 or n_tgt <= 0:
        return []
    first = 1 if shift else 0
    piece = weights.numpy()[first : first + len(tgt_words), pair.prefix : len(pair.src_ids)]  # (T, S')
    src_onehot = src_words[:, None] == np.arange(n_src)  # (S', Ws): whitespace pieces (-1) in no word
    tgt_onehot = np.arange(n_tgt)[:, None] == tgt_words  # (Wt, T)
    by_word = tgt_onehot.astype(np.float32) @ (piece @ src_onehot.astype(np.float32))  # (Wt, Ws)
    best = by_word.argmax(axis=1)  # (Wt,)
    forward = {(int(best[t]), t) for t in range(n_tgt)}
    back = by_word.argmax(axis=0)  # (Ws,): each source word's most attending target word
    reverse = {(s, int(back[s])) for s in range(n_src)}
    return sorted(symmetrise(forward, reverse, SYMMETRISE), key=lambda link: (link[1], link[0]))


def symmetrise(forward: set[Link], reverse: set[Link], how: str) -> set[Link]:
    """One set of links from the target-to-source ``forward`` and source-to-target ``reverse`` ones."""
    if how == "grow-diag-final-and":
        return grow_diag_final_and(forward, reverse)
    if how == "union":
        return forward | reverse
    if how == "target":
        return set(forward)
    raise ValueError(f"symmetrisation must be one of {', '.join(SYMMETRISATIONS)}, got {how!r}")


NEIGHBOURS = [(-1, 0), (0, -1), (1, 0), (0, 1), (-1, -1), (-1, 1), (1, -1), (1, 1)]


def grow_diag_final_and(forward: set[Link], reverse: set[Link]) -> set[Link]:
    """Moses' grow-diag-final-and (Koehn et al. 2005): the intersection of the two directions, grown by
    neighbouring links of the union that align a word not aligned yet, then each direction's links
    between two words both still unaligned."""
    union, links = forward | reverse, forward & reverse
    sources, targets = {s for s, _ in links}, {t for _, t in links}  # the words aligned so far

    def add(link: Link) -> None:
        links.add(link)
        sources.add(link[0])
        targets.add(link[1])

    added = True
    while added:
        added = False
        for s, t in sorted(links):
            for ds, dt in NEIGHBOURS:
                cand = (s + ds, t + dt)
                if cand in union and cand not in links and (cand[0] not in sources or cand[1] not in targets):
                    add(cand)
                    added = True
    for direction in (forward, reverse):
        for s, t in sorted(direction):
            if s not in sources and t not in targets:
                add((s, t))
    return links
