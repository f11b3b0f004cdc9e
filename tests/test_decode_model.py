"""Search with a tiny random Transformer: consistency properties that must hold for any weights."""

from __future__ import annotations

from dataclasses import replace

import pytest
import torch
from uncached import Uncached

from mt.config import DecodeConfig, ModelConfig
from mt.data.tokenizer import BOS_ID, EOS_ID, PAD_ID
from mt.decode import beam_search, greedy_search, sample
from mt.decode.length_penalty import length_penalty
from mt.decode.sampling import filter_top_k, filter_top_p, make_sampler
from mt.model import build_model

VOCAB = 64


class EosBiased:
    """The tiny model with EOS made likelier (random weights rarely stop) and every decode call recorded."""

    def __init__(self, model: torch.nn.Module, eos_bias: float = 0.5) -> None:
        self.model, self.eos_bias = model, eos_bias
        self.batch_sizes: list[int] = []

    def encode(self, src, src_pad_mask):
        return self.model.encode(src, src_pad_mask)

    def new_cache(self, beams_per_sentence=None):
        return self.model.new_cache(beams_per_sentence)

    def decode(self, tgt_in, enc, cache=None):
        self.batch_sizes.append(tgt_in.size(0))
        logits = self.model.decode(tgt_in, enc, cache).clone()  # (N, T, V)
        logits[..., EOS_ID] += self.eos_bias
        return logits


@pytest.fixture(scope="module")
def model() -> EosBiased:
    torch.manual_seed(1234)
    cfg = ModelConfig(encoder_layers=2, decoder_layers=2, d_model=32, d_ff=64, heads=4, dropout=0.0)
    return EosBiased(build_model(cfg, VOCAB, VOCAB).eval())


@pytest.fixture(scope="module")
def batch() -> tuple[torch.Tensor, torch.Tensor]:
    """8 sources of 1..12 pieces + EOS, padded: src (8, 13), src_pad_mask (8, 13)."""
    gen = torch.Generator().manual_seed(7)
    lengths = [3, 12, 1, 7, 5, 9, 2, 6]
    src = torch.full((len(lengths), max(lengths) + 1), PAD_ID)
    for row, n in enumerate(lengths):
        src[row, :n] = torch.randint(4, VOCAB, (n,), generator=gen)
        src[row, n] = EOS_ID
    return src, src == PAD_ID


def cfg_of(**overrides) -> DecodeConfig:
    return replace(DecodeConfig(max_len_a=1.0, max_len_b=4), **overrides)


def rescore(model: EosBiased, src: torch.Tensor, mask: torch.Tensor, tokens: list[int]) -> float:
    """Teacher-forced log-prob of ``tokens + [EOS]`` with one full forward, no cache."""
    with torch.inference_mode():
        enc = model.encode(src, mask)
        tgt_in = torch.tensor([[BOS_ID, *tokens]])
        lprobs = torch.log_softmax(model.decode(tgt_in, enc).float(), dim=-1)[0]  # (T, V)
        target = torch.tensor([*tokens, EOS_ID])
        return lprobs.gather(1, target.unsqueeze(1)).sum().item()


@pytest.mark.parametrize(
    ("name", "alpha", "stopping"),
    [("gnmt", 0.6, "topk_eos"), ("length", 1.0, "topk_eos"), ("none", 0.0, "topk_eos"), ("none", 0.0, "exact")],
)
def test_beam_one_equals_greedy(model, batch, name: str, alpha: float, stopping: str) -> None:
    # by construction for these rules (see mt.decode.stopping); exact with a penalty: the next test
    cfg = cfg_of(beam_size=1, length_penalty=name, alpha=alpha, stopping=stopping)
    beam, greedy = beam_search(model, *batch, cfg), greedy_search(model, *batch, cfg)
    assert [b[0].tokens for b in beam] == [g[0].tokens for g in greedy]
    assert [b[0].score for b in beam] == [g[0].score for g in greedy]  # exactly


@pytest.mark.parametrize(("name", "alpha"), [("gnmt", 0.6), ("length", 1.0)])
def test_exact_beam_one_scores_at_least_greedy(model, batch, name: str, alpha: float) -> None:
    """Under a penalty, exact beam 1 follows greedy's path to greedy's EOS (so it finishes greedy's
    output) and may go on with the runner-up: its score is never below greedy's."""
    cfg = cfg_of(beam_size=1, length_penalty=name, alpha=alpha, stopping="exact")
    for b, g in zip(beam_search(model, *batch, cfg), greedy_search(model, *batch, cfg), strict=True):
        assert b[0].score >= g[0].score
        assert b[0].tokens == g[0].tokens or b[0].score > g[0].score


@pytest.mark.parametrize(("name", "alpha"), [("gnmt", 0.6), ("length", 1.0), ("none", 0.0)])
def test_beam_scores_equal_rescoring(model, batch, name: str, alpha: float) -> None:
    src, mask = batch
    results = beam_search(model, src, mask, cfg_of(beam_size=4, nbest=4, length_penalty=name, alpha=alpha))
    lengths = set()
    for i, nbest in enumerate(results):
        assert len(nbest) == 4
        keep = ~mask[i]
        for hyp in nbest:
            logprob = rescore(model, src[i : i + 1, keep], mask[i : i + 1, keep], hyp.tokens)
            lp = length_penalty(len(hyp.tokens) + 1, name, alpha)
            assert hyp.logprob == pytest.approx(logprob, abs=1e-4)
            assert hyp.score == pytest.approx(logprob / lp, abs=1e-4)
            assert EOS_ID not in hyp.tokens and BOS_ID not in hyp.tokens and PAD_ID not in hyp.tokens
            lengths.add(len(hyp.tokens))
    assert len(lengths) > 3  # both early EOS and length-limited outputs were checked


def test_nbest_sorted_by_score(model, batch) -> None:
    for nbest in beam_search(model, *batch, cfg_of(beam_size=5, nbest=3)):
        scores = [h.score for h in nbest]
        assert len(scores) == 3 and scores == sorted(scores, reverse=True)
        assert len({tuple(h.tokens) for h in nbest}) == 3


def test_batch_equals_each_sentence_alone(model, batch) -> None:
    src, mask = batch
    cfg = cfg_of(beam_size=3, nbest=2)
    together = beam_search(model, src, mask, cfg)
    for i, nbest in enumerate(together):
        keep = ~mask[i]
        (alone,) = beam_search(model, src[i : i + 1, keep], mask[i : i + 1, keep], cfg)
        assert [h.tokens for h in alone] == [h.tokens for h in nbest]
        assert [h.score for h in alone] == pytest.approx([h.score for h in nbest], abs=1e-4)


@pytest.mark.parametrize("search", [beam_search, greedy_search])
def test_cache_equals_full_recompute(model, batch, search) -> None:
    cfg = cfg_of(beam_size=4, nbest=2 if search is beam_search else 1)
    cached, uncached = search(model, *batch, cfg), search(Uncached(model), *batch, cfg)
    for with_cache, without in zip(cached, uncached, strict=True):
        assert [h.tokens for h in with_cache] == [h.tokens for h in without]
        assert [h.score for h in with_cache] == pytest.approx([h.score for h in without], abs=1e-4)


def test_finished_sentences_leave_the_batch(model, batch) -> None:
    model.batch_sizes.clear()
    beam_search(model, *batch, cfg_of(beam_size=4))
    sizes = model.batch_sizes
    assert sizes[0] == 8 and all(n % 4 == 0 for n in sizes[1:])  # step 0: one row a sentence, then K
    assert sizes[1:] == sorted(sizes[1:], reverse=True) and sizes[-1] < sizes[1]


def test_sampling_is_reproducible_with_a_seed(model, batch) -> None:
    cfg = cfg_of(strategy="sample", temperature=1.5)
    first, again = sample(model, *batch, cfg), sample(model, *batch, cfg)
    other = sample(model, *batch, replace(cfg, seed=2))
    assert [h[0].tokens for h in first] == [h[0].tokens for h in again]
    assert [h[0].tokens for h in first] != [h[0].tokens for h in other]


def test_sampling_with_top_k_one_is_greedy(model, batch) -> None:
    cfg = cfg_of(strategy="sample", top_k=1, temperature=2.0)
    assert sample(model, *batch, cfg) == greedy_search(model, *batch, cfg)


def test_sampler_never_leaves_the_top_k() -> None:
    gen = torch.Generator().manual_seed(0)
    lprobs = torch.log_softmax(torch.randn(4, VOCAB, generator=gen), dim=-1)  # (4, V)
    choose = make_sampler(5.0, 3, 1.0, torch.Generator().manual_seed(1))  # temperature, top_k, top_p
    draws = torch.stack([choose(lprobs) for _ in range(300)], dim=1)  # (4, 300)
    top3 = lprobs.topk(3, dim=-1).indices  # (4, 3)
    for row in range(4):
        assert set(draws[row].tolist()) == set(top3[row].tolist())  # inside the top 3, and all of it


def test_filters_keep_the_right_sets() -> None:
    logits = torch.tensor([[0.5, 0.3, 0.15, 0.05]]).log()
    assert filter_top_k(logits, 2).isfinite().tolist() == [[True, True, False, False]]
    assert filter_top_p(logits, 0.7).isfinite().tolist() == [[True, True, False, False]]
    assert filter_top_p(logits, 0.81).isfinite().tolist() == [[True, True, True, False]]
    assert filter_top_p(logits, 0.1).isfinite().tolist() == [[True, False, False, False]]
    shuffled = logits[:, [2, 0, 3, 1]]  # vocabulary order must not matter
    assert filter_top_p(shuffled, 0.7).isfinite().tolist() == [[False, True, False, True]]
