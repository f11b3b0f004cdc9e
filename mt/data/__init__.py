"""Parallel data: sources, SentencePiece tokenizers, binarized splits, token-budget batching."""

from mt.data.batching import Batch, TokenBatchSampler, batch_by_tokens, collate
from mt.data.binarize import PreparedData, prepare_data
from mt.data.demo import demo_numbers, write_demo_corpus
from mt.data.errors import DataError
from mt.data.formats import check_line_counts
from mt.data.lines import count_lines, read_lines, read_stream
from mt.data.sources import SPLITS, open_split
from mt.data.split import TokenizedSplit
from mt.data.subword_sampling import SubwordSampling, subword_sampling
from mt.data.tokenizer import (
    BOS_ID,
    EOS_ID,
    PAD_ID,
    UNK_ID,
    Tokenizer,
    Tokenizers,
    train_tokenizer,
)

__all__ = [
    "BOS_ID",
    "EOS_ID",
    "PAD_ID",
    "SPLITS",
    "UNK_ID",
    "Batch",
    "SubwordSampling",
    "DataError",
    "PreparedData",
    "TokenBatchSampler",
    "TokenizedSplit",
    "Tokenizer",
    "Tokenizers",
    "batch_by_tokens",
    "check_line_counts",
    "collate",
    "count_lines",
    "demo_numbers",
    "open_split",
    "prepare_data",
    "read_lines",
    "read_stream",
    "subword_sampling",
    "train_tokenizer",
    "write_demo_corpus",
]
