"""An ensemble: several models with one target vocabulary decoding as one (fairseq's and Marian's ensembles).

Every member encodes the source and keeps its own decoding state; each step's log-probabilities are the
log of the members' mean probabilities, ``log(1/M sum_m softmax(logits_m))`` (fairseq's rule). An
``Ensemble`` has the part of ``Seq2SeqTransformer`` that search uses (``encode``, ``new_cache``, ``decode``,
``join``), so greedy search, beam search, sampling, continuous batching and ``Translator`` take it as
they take one model. ``decode`` returns the log-probabilities where a model returns logits: a log-softmax
leaves them as they are, and their largest entry is the ensemble's choice.

Members trained apart (other seeds, other depths) make different errors: on Multi30k valid four 55-minute
models scored 42.58 greedy BLEU together against 41.06-41.43 alone (docs/recipes.md). Decoding costs the
sum of the members' costs.
"""

from __future__ import annotations

import copy
import math
from collections.abc import Sequence

import torch
import torch.nn.functional as F
from torch import Tensor, nn


class EnsembleState:
    """One state per member (encoder outputs, or decoding caches) that reorder and extend together."""

    def __init__(self, parts: Sequence) -> None:
        self.parts = list(parts)

    def reorder(self, index: Tensor) -> EnsembleState:
        """Every member's ``reorder(index)``, in place."""
        for part in self.parts:
            part.reorder(index)
        return self

    def extend(self, other: EnsembleState) -> EnsembleState:
        """Every member's ``extend`` with the same member of ``other`` (encoder outputs), in place."""
        for part, more in zip(self.parts, other.parts, strict=True):
            part.extend(more)
        return self

    def __copy__(self) -> EnsembleState:
        """A copy whose members are copies too: reordering it leaves this one as it is (``SentenceQueue``)."""
        return EnsembleState([copy.copy(part) for part in self.parts])


class Ensemble(nn.Module):
    """Models with the same target vocabulary (``padded`` output size) decoding as one (module doc)."""

    def __init__(self, members: Sequence[nn.Module]) -> None:
        super().__init__()
        if len(members) < 2:
            raise ValueError(f"an ensemble needs at least 2 models, got {len(members)}")
        self.members = nn.ModuleList(members)

    def encode(self, src: Tensor, src_pad_mask: Tensor) -> EnsembleState:
        return EnsembleState([member.encode(src, src_pad_mask) for member in self.members])

    def new_cache(self, beams_per_sentence: int | None = None) -> EnsembleState:
        return EnsembleState([member.new_cache(beams_per_sentence) for member in self.members])

    def decode(self, tgt_in: Tensor, enc: EnsembleState, cache: EnsembleState | None = None) -> Tensor:
        """tgt_in (B, T) -> (B, T, V) float32 log-probabilities of the members' mean distribution."""
        caches = cache.parts if cache is not None else [None] * len(self.members)
        log_probs = [
            F.log_softmax(member.decode(tgt_in, part, state).float(), dim=-1)  # (B, T, V)
            for member, part, state in zip(self.members, enc.parts, caches, strict=True)
        ]
        return torch.logsumexp(torch.stack(log_probs), dim=0) - math.log(len(log_probs))

    def cross_attention_weights(self, src: Tensor, src_pad_mask: Tensor, tgt_in: Tensor, layer: int = -1) -> Tensor:
        """The members' mean head-averaged encoder-decoder attention (B, T, S) (``mt-eval --align``)."""
        weights = [member.cross_attention_weights(src, src_pad_mask, tgt_in, layer) for member in self.members]
        return torch.stack(weights).mean(dim=0)

    def join(self, enc: EnsembleState, cache: EnsembleState, new: EnsembleState) -> None:
        """Sentences join every member's decoding (continuous batching)."""
        for member, part, state, more in zip(self.members, enc.parts, cache.parts, new.parts, strict=True):
            member.join(part, state, more)
