"""A testing utility: run any decodable model *without* its KV cache, to check the cache against.

``Uncached(model)`` has the same ``encode``/``new_cache``/``decode`` interface that search uses, but its
"cache" only stores the token prefix of every row; each ``decode`` call re-runs the model's full
causal forward over the whole prefix and returns the logits of the new position(s). ``reorder``
selects prefix rows like the real cache, so a search run on ``Uncached(model)`` must give the same
tokens (and, up to float error, scores) as on ``model``. With ``beams_per_sentence`` (beam search)
the encoder output holds one row per sentence and the rows are sentences x beams, as with
``mt.model.BeamCache``: each sentence's encoder row is repeated for its beams. Quadratic in the
length: tests only.
"""

from __future__ import annotations

import torch
from torch import Tensor

from mt.decode.common import DecodableModel, Reorderable
from mt.model import EncoderOut


class PrefixCache:
    """The tokens fed so far, (N, t) long, or None before the first call."""

    def __init__(self, beams_per_sentence: int | None) -> None:
        self.prefix: Tensor | None = None
        self.beams_per_sentence = beams_per_sentence

    def reorder(self, index: Tensor) -> PrefixCache:
        if self.prefix is not None:
            self.prefix = self.prefix.index_select(0, index)
        return self


class Uncached:
    """Wraps a model so that decoding recomputes the full forward every step (see module doc)."""

    def __init__(self, model: DecodableModel) -> None:
        self.model = model

    def encode(self, src: Tensor, src_pad_mask: Tensor) -> Reorderable:
        return self.model.encode(src, src_pad_mask)

    def new_cache(self, beams_per_sentence: int | None = None) -> PrefixCache:
        return PrefixCache(beams_per_sentence)

    def decode(self, tgt_in: Tensor, enc: EncoderOut, cache: Reorderable | None = None) -> Tensor:
        """tgt_in (N, T) new tokens -> logits (N, T, V) of those positions, from a cache-free forward."""
        if not isinstance(cache, PrefixCache):
            return self.model.decode(tgt_in, enc)
        prefix = tgt_in if cache.prefix is None else torch.cat([cache.prefix, tgt_in], dim=1)  # (N, t + T)
        cache.prefix = prefix
        if cache.beams_per_sentence is not None:  # one encoder row per sentence: repeat it for the beams
            beams = tgt_in.size(0) // enc.out.size(0)
            assert beams * enc.out.size(0) == tgt_in.size(0), "rows are not sentences x beams"
            enc = EncoderOut(enc.out.repeat_interleave(beams, 0), enc.pad_mask.repeat_interleave(beams, 0))
        return self.model.decode(prefix, enc)[:, -tgt_in.size(1) :]  # (N, T, V)
