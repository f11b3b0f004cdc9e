"""Decoding: beam search, greedy and sampling over a cached Transformer decoder, and the Translator.

Search functions take ``(model, src (B, S), src_pad_mask (B, S), cfg: DecodeConfig)`` and return one
n-best list of ``Hypothesis`` per sentence, best first. ``Translator`` turns text lines into text.
"""

from mt.decode.beam import beam_search
from mt.decode.common import Hypothesis
from mt.decode.greedy import greedy_search
from mt.decode.length_penalty import length_penalty
from mt.decode.sampling import sample
from mt.decode.search import search
from mt.decode.translator import Translation, Translator

__all__ = [
    "Hypothesis",
    "Translation",
    "Translator",
    "beam_search",
    "greedy_search",
    "length_penalty",
    "sample",
    "search",
]
