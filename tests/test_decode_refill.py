"""Continuous batching (``mt.decode.refill``): sentences that join a decoding in progress get exactly
the outputs they get in whole batches, for every position scheme and both searches."""

from __future__ import annotations

import pytest
import torch

from mt.config import DecodeConfig, ModelConfig
from mt.data.tokenizer import BOS_ID, EOS_ID, PAD_ID
from mt.decode import beam_search, greedy_search
from mt.decode.refill import SentenceQueue, first_beam_only, joining_tokens
from mt.model import EncoderOut, build_model

VOCAB = 64
LENGTHS = [3, 12, 1, 7, 5, 9, 2, 6, 4, 8, 11, 3, 2, 10]


class Recorded:
    """A model with EOS made likelier (random weights rarely stop), its decode row counts recorded."""

    def __init__(self, model: torch.nn.Module) -> None:
        self.model, self.rows, self.joins = model, [], 0

    def encode(self, src, src_pad_mask):
        return self.model.encode(src, src_pad_mask)

    def new_cache(self, beams_per_sentence=None):
        return self.model.new_cache(beams_per_sentence)

    def join(self, enc, cache, new):
        self.joins += 1
        self.model.join(enc, cache, new)

    def decode(self, tgt_in, enc, cache=None):
        self.rows.append(tgt_in.size(0))
        logits = self.model.decode(tgt_in, enc, cache).clone()
        logits[..., EOS_ID] += 0.4
        return logits


OPTIONS = {
    "paper": {},
    "pre_ln_rope": dict(pre_ln=True, positions="rope"),
    "learned_gqa_qknorm": dict(positions="learned", kv_heads=2, qk_norm=True),
}


@pytest.fixture(scope="module", params=list(OPTIONS))
def model(request) -> Recorded:
    torch.manual_seed(1234)
    cfg = ModelConfig(encoder_layers=2, decoder_layers=2, d_model=32, d_ff=64, heads=4, dropout=0.0,
                      **OPTIONS[request.param])
    return Recorded(build_model(cfg, VOCAB, VOCAB).eval())


@pytest.fixture(scope="module")
def batch() -> tuple[torch.Tensor, torch.Tensor]:
    gen = torch.Generator().manual_seed(7)
    src = torch.full((len(LENGTHS), max(LENGTHS) + 1), PAD_ID)
    for row, n in enumerate(LENGTHS):
        src[row, :n] = torch.randint(4, VOCAB, (n,), generator=gen)
        src[row, n] = EOS_ID
    return src, src == PAD_ID


def same_outputs(whole, refilled) -> None:
    for alone, joined in zip(whole, refilled, strict=True):
        assert [h.tokens for h in joined] == [h.tokens for h in alone]
        assert [h.score for h in joined] == pytest.approx([h.score for h in alone], abs=1e-5)


@pytest.mark.parametrize("live", [[1] * 14, [3] * 14, [2] * 7 + [5] * 7])
@pytest.mark.parametrize("beam", [1, 4])
def test_beam_search_with_refill_equals_whole_batches(model, batch, beam, live) -> None:
    cfg = DecodeConfig(beam_size=beam, nbest=min(2, beam), max_len_a=1.0, max_len_b=4, stopping="exact")
    whole = beam_search(model, *batch, cfg)
    model.joins = 0
    same_outputs(whole, beam_search(model, *batch, cfg, live=live))
    assert model.joins > 0 or max(live) == 1  # one at a time: each sentence in a fresh batch


@pytest.mark.parametrize("live", [[1] * 14, [4] * 14, [2] * 7 + [5] * 7])
@pytest.mark.parametrize("min_len", [0, 6])
def test_greedy_search_with_refill_equals_whole_batches(model, batch, min_len, live) -> None:
    cfg = DecodeConfig(strategy="greedy", beam_size=1, max_len_a=1.0, max_len_b=4, min_len=min_len)
    whole = greedy_search(model, *batch, cfg)
    model.joins, model.rows = 0, []
    same_outputs(whole, greedy_search(model, *batch, cfg, live=live))
    assert (model.joins > 0 or max(live) == 1) and max(model.rows) <= max(live)


def test_freed_places_are_refilled(model, batch) -> None:
    cfg = DecodeConfig(strategy="greedy", beam_size=1, max_len_a=1.0, max_len_b=4)
    model.rows = []
    greedy_search(model, *batch, cfg)
    whole_steps = len(model.rows)
    model.rows = []
    greedy_search(model, *batch, cfg, live=[4] * 14)
    assert max(model.rows) == 4 and len(model.rows) < 14 / 4 * whole_steps  # fewer steps than 4 batches
    assert model.rows.count(4) > len(model.rows) // 2  # places are kept full


def test_the_queue_refills_once_a_quarter_is_free() -> None:
    src = torch.arange(10).view(10, 1) + 4
    queue = SentenceQueue(src, src == PAD_ID, [8] * 6 + [4] * 4)  # a batch of 6, then batches of 4
    assert queue.take(0) == [0, 1, 2, 3, 4, 5]
    assert not queue.wants(4) and queue.wants(3)  # the next sentence's batch has 4 places: 1 must be free
    assert queue.take(3) == [6]
    queue = SentenceQueue(src, src == PAD_ID, [8] * 10)
    assert queue.take(0) == list(range(8)) and not queue.wants(7) and queue.wants(6)  # 2 of 8 free
    assert queue.take(5) == [8, 9] and not queue and not queue.wants(0)


def test_a_queue_without_limits_takes_everything_at_once() -> None:
    src = torch.tensor([[5, EOS_ID, PAD_ID], [6, 7, EOS_ID]])
    queue = SentenceQueue(src, src == PAD_ID)
    assert queue.take(0) == [0, 1] and not queue
    sources, mask = SentenceQueue(src, src == PAD_ID).sources([0])
    assert sources.tolist() == [[5, EOS_ID]] and not mask.any()  # cut to its own length


def test_sentences_are_encoded_a_batch_at_a_time_once() -> None:
    src = torch.tensor([[4 + i, EOS_ID] for i in range(5)])
    calls: list[list[int]] = []

    def encode(rows, pad_mask):
        calls.append(rows[:, 0].tolist())
        return EncoderOut(rows.float().unsqueeze(-1), pad_mask)  # (n, S, 1): the ids themselves

    queue = SentenceQueue(src, src == PAD_ID, [2, 2, 3, 3, 3])  # batches [0, 1] and [2, 3, 4]
    first = queue.encoded(encode, [0, 1])
    assert calls == [[4, 5]] and first.out[:, 0, 0].tolist() == [4, 5]
    third = queue.encoded(encode, [2])
    assert calls == [[4, 5], [6, 7, 8]] and third.out[:, 0, 0].tolist() == [6]
    rest = queue.encoded(encode, [3, 4])  # from the batch encoded before: no new call
    assert calls == [[4, 5], [6, 7, 8]] and rest.out[:, 0, 0].tolist() == [7, 8]
    queue = SentenceQueue(src, src == PAD_ID, [2, 2, 3, 3, 3])
    both = queue.encoded(encode, [0, 1, 2])  # a take across two batches: one output, in order
    assert both.out[:, 0, 0].tolist() == [4, 5, 6] and both.pad_mask.shape == (3, 2)


def test_bad_live_limits_are_refused() -> None:
    src = torch.tensor([[5, EOS_ID]])
    with pytest.raises(ValueError, match="one entry >= 1 per sentence"):
        SentenceQueue(src, src == PAD_ID, [0])


def test_joining_rows_start_from_bos_with_one_live_beam() -> None:
    tokens = joining_tokens(2, 3, torch.device("cpu"))
    assert tokens[:, -1].tolist() == [BOS_ID, BOS_ID] and (tokens[:, :-1] == PAD_ID).all()
    scores = first_beam_only(2, 3, torch.device("cpu"))
    assert scores[:, 0].tolist() == [0.0, 0.0] and torch.isinf(scores[:, 1:]).all()


@pytest.mark.parametrize("strategy", ["beam", "greedy"])
def test_sentences_are_reported_once_as_they_end(model, batch, strategy: str) -> None:
    cfg = DecodeConfig(strategy=strategy, beam_size=3 if strategy == "beam" else 1, max_len_a=1.0, max_len_b=4)
    search = beam_search if strategy == "beam" else greedy_search
    heard: list[list[int]] = []
    reported = {}

    def on_done(found) -> None:
        heard.append([s for s, _ in found])
        reported.update(found)

    results = search(model, *batch, cfg, live=[4] * 14, on_done=on_done)
    assert sorted(s for group in heard for s in group) == list(range(14)) and len(heard) > 3
    assert [reported[s] for s in range(14)] == results


def test_sentences_join_a_beam_cache_right_after_its_first_step() -> None:
    """Regression: right after step 0 fans out to K beams (the slot table just made, one step wide), a
    sentence joins; its beams see their own steps only."""
    torch.manual_seed(0)
    cfg = ModelConfig(encoder_layers=1, decoder_layers=2, d_model=32, d_ff=64, heads=4, dropout=0.0)
    model = build_model(cfg, VOCAB, VOCAB).eval()
    src = torch.tensor([[5, 6, EOS_ID], [7, EOS_ID, PAD_ID], [8, 9, EOS_ID]])
    mask = src == PAD_ID
    with torch.inference_mode():
        enc, cache = model.encode(src[:2], mask[:2]), model.new_cache(beams_per_sentence=2)
        model.decode(torch.full((2, 1), BOS_ID), enc, cache)  # step 0: one row a sentence
        cache.reorder(torch.tensor([0, 0, 1, 1]))  # two beams each
        model.join(enc, cache, model.encode(src[2:], mask[2:]))
        tokens = torch.tensor([[10], [11], [12], [13], [BOS_ID], [BOS_ID]])
        joined = model.decode(tokens, enc, cache)  # (6, 1, V)
        alone = model.decode(torch.full((1, 1), BOS_ID), model.encode(src[2:], mask[2:]), model.new_cache())
    assert torch.allclose(joined[4:], alone.expand(2, -1, -1), atol=1e-5)
