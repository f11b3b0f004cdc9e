"""Translator: batching by tokens, input order, empty lines, too-long inputs, n-best output."""

from __future__ import annotations

import warnings
from dataclasses import replace
from types import SimpleNamespace

import pytest
import torch

from mt.config import DecodeConfig, ModelConfig
from mt.data.tokenizer import EOS_ID
from mt.decode import Translator
from mt.errors import UserError
from mt.model import build_model

VOCAB = 64


class WordTokenizer:
    """Each word is one id (4 + a stable hash); ids decode to ``w<id>``. Enough to drive a Translator."""

    vocab_size = VOCAB - 4  # the last ids play the embedding's padding: never generated
    language_codes: dict[str, int] = {}  # mt's own vocabularies have none (``Tokenizer.language_codes``)

    def encode(self, text: str) -> list[int]:
        return [4 + sum(map(ord, word)) % (VOCAB - 8) for word in text.split()]

    def decode(self, ids: list[int]) -> str:
        return " ".join(f"w{i}" for i in ids)


class Recording(torch.nn.Module):
    """The tiny model, with every decode call's row count recorded (and EOS a little likelier)."""

    def __init__(self) -> None:
        super().__init__()
        cfg = ModelConfig(encoder_layers=2, decoder_layers=2, d_model=32, d_ff=64, heads=4, dropout=0.1)
        self.inner = build_model(cfg, VOCAB, VOCAB)
        self.batch_sizes: list[int] = []
        self.src_shapes: list[tuple[int, int]] = []

    def encode(self, src, src_pad_mask):
        self.src_shapes.append(tuple(src.shape))
        return self.inner.encode(src, src_pad_mask)

    def new_cache(self, beams_per_sentence=None):
        return self.inner.new_cache(beams_per_sentence)

    def join(self, enc, cache, new):
        self.inner.join(enc, cache, new)

    def decode(self, tgt_in, enc, cache=None):
        assert not self.training, "decoding must run in eval mode"
        self.batch_sizes.append(tgt_in.size(0))
        logits = self.inner.decode(tgt_in, enc, cache).clone()
        logits[..., EOS_ID] += 0.5
        return logits


LINES = [
    "a man in a blue shirt is standing on a ladder cleaning windows",
    "",
    "two dogs play",
    "a group of people stand in front of an igloo",
    "   ",
    "girl",
    "several men in hard hats are operating a giant pulley system",
]


@pytest.fixture(scope="module")
def model() -> Recording:
    torch.manual_seed(4321)
    return Recording()


def make(model: Recording, **overrides) -> Translator:
    tokenizer = WordTokenizer()
    tokenizers = SimpleNamespace(src=tokenizer, tgt=tokenizer, joint=True)
    cfg = replace(DecodeConfig(beam_size=3, max_len_a=1.0, max_len_b=3), **overrides)
    return Translator(model, tokenizers, cfg, "cpu")


def test_batched_output_in_input_order_equals_one_by_one(model) -> None:
    model.train()
    translator = make(model, max_tokens=100, max_sentences=2)
    batched = translator.translate(LINES)
    assert model.training  # restored after translating
    alone = [translator.translate([line])[0] for line in LINES]
    assert batched == alone
    assert batched[1] == "" and batched[4] == ""
    assert all(out for i, out in enumerate(batched) if i not in (1, 4))


def test_batches_respect_the_token_budget(model) -> None:
    # the budget counts (pieces + EOS) x beam 3, padded: the 13-piece line alone costs 42
    model.src_shapes.clear()
    make(model, max_tokens=60, max_sentences=64).translate(LINES)
    assert all(n * width * 3 <= 60 for n, width in model.src_shapes)
    assert sorted(n for n, _ in model.src_shapes) == [1, 1, 1, 2]  # (pieces + EOS) 2 + 4, 11, 12, 14
    model.src_shapes.clear()
    make(model, max_tokens=10_000, max_sentences=3).translate(LINES)
    assert sorted(model.src_shapes) == [(2, 14), (3, 11)]  # sorted by length: the longest together


def test_on_batch_hears_each_line_once_as_its_batch_ends(model) -> None:
    model.src_shapes.clear()
    heard: list[list[int]] = []
    translations = {}

    def on_batch(done) -> None:
        heard.append([i for i, _ in done])
        translations.update(done)

    results = make(model, max_tokens=10_000, max_sentences=3).translate_nbest(LINES, on_batch=on_batch)
    assert heard[0] == [1, 4]  # the empty lines first, then one call per decoded batch
    assert sorted(len(ids) for ids in heard[1:]) == sorted(n for n, _ in model.src_shapes) == [2, 3]
    assert sorted(i for ids in heard for i in ids) == list(range(len(LINES)))
    assert [translations[i] for i in range(len(LINES))] == results


def test_empty_lines_never_reach_the_model(model) -> None:
    model.batch_sizes.clear()
    assert make(model).translate(["", "  ", "\t"]) == ["", "", ""]
    assert model.batch_sizes == []


def test_too_long_input_is_truncated_with_a_warning_or_rejected(model) -> None:
    lines = ["two dogs play", "one two three four five six seven", "girl"]
    translator = make(model)
    translator.max_src_len = 4
    with pytest.warns(UserWarning, match="line 2: 7 source pieces"):
        truncated = translator.translate(lines)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert truncated[1] == translator.translate(["one two three four"])[0]
    translator.cfg = replace(translator.cfg, on_too_long="reject")
    with pytest.raises(UserError, match="line 2"):
        translator.translate(lines)


def test_max_src_len_defaults_to_the_model_positions(model) -> None:
    tokenizer = WordTokenizer()
    tokenizers = SimpleNamespace(src=tokenizer, tgt=tokenizer, joint=True)
    assert Translator(model, tokenizers, DecodeConfig(), max_positions=16).max_src_len == 15


def test_nbest_with_scores_and_token_counts(model) -> None:
    results = make(model, beam_size=4, nbest=3).translate_nbest(LINES)
    assert [len(r.hypotheses) for r in results] == [3, 0, 3, 3, 0, 3, 3]
    for line, result in zip(LINES, results, strict=True):
        scores = [h.score for h in result.hypotheses]
        assert scores == sorted(scores, reverse=True)
        assert result.src_tokens == len(line.split())
        if result.hypotheses:
            assert result.tgt_tokens == len(result.hypotheses[0].tokens) + 1
            assert result.texts[0] == result.text
            assert all(t < WordTokenizer.vocab_size for h in result.hypotheses for t in h.tokens)


@pytest.mark.parametrize("strategy", ["greedy", "sample"])
def test_other_strategies_translate_every_line(model, strategy: str) -> None:
    translator = make(model, strategy=strategy, max_sentences=3)
    outputs = translator.translate(LINES)
    assert len(outputs) == len(LINES) and outputs[1] == "" and outputs[2]
    assert outputs == translator.translate(LINES)  # sampling is seeded per call


@pytest.mark.parametrize("strategy", ["beam", "greedy"])
def test_refilled_batches_translate_as_whole_batches(model, strategy: str) -> None:
    lines = LINES * 3
    whole = make(model, strategy=strategy, max_sentences=2, refill="none").translate_nbest(lines)
    model.src_shapes.clear()
    refilled = make(model, strategy=strategy, max_sentences=2, refill="all").translate_nbest(lines)
    assert [t.texts for t in refilled] == [t.texts for t in whole]
    assert [h.score for t in refilled for h in t.hypotheses] == pytest.approx(
        [h.score for t in whole for h in t.hypotheses], abs=1e-5
    )
    assert len(model.src_shapes) > 1 and all(rows <= 2 for rows, _ in model.src_shapes)  # sentences joined


def test_a_refilled_pool_is_decoded_longest_first(model) -> None:
    lines = [" ".join(["word"] * n) for n in (2, 9, 4, 12, 1, 7, 3)]
    model.src_shapes.clear()
    make(model, strategy="greedy", max_sentences=2, refill="greedy").translate(lines)
    widths = [width for _, width in model.src_shapes]  # each batch's source, EOS included, as it is encoded
    assert widths[0] == 13 and widths == sorted(widths, reverse=True)


def test_refill_applies_to_the_named_strategy_only(model) -> None:
    batches = [[0, 1], [2, 3], [4]]
    assert len(make(model, strategy="greedy", refill="greedy")._pools(batches)) == 1
    assert len(make(model, strategy="beam", refill="greedy")._pools(batches)) == 3
    assert len(make(model, strategy="beam", refill="all")._pools(batches)) == 1
    assert len(make(model, strategy="sample", refill="all")._pools(batches)) == 3
    assert len(make(model, strategy="greedy", refill="none")._pools(batches)) == 3


def test_with_refill_on_batch_hears_lines_as_they_end(model) -> None:
    heard: list[list[int]] = []
    translations = {}

    def on_batch(done) -> None:
        heard.append([i for i, _ in done])
        translations.update(done)

    lines = LINES * 2
    results = make(model, strategy="greedy", max_sentences=3, refill="greedy").translate_nbest(lines, on_batch=on_batch)
    assert sorted(i for ids in heard for i in ids) == list(range(len(lines)))
    assert len(heard) > 1 + len(lines) // 3  # the empty lines, then lines as they end, not batch by batch
    assert [translations[i] for i in range(len(lines))] == results
