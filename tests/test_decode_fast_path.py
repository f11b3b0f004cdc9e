"""Decoding's fast path (``DecoderLayer.step``, the kept beam mask) against the plain one: the same
outputs bit for bit, on the trained demo model and on random models with every layer option."""

from __future__ import annotations

import dataclasses
import math

import pytest
import torch
from export_helpers import demo_model

from mt.checkpoint import load_for_inference
from mt.config import ModelConfig
from mt.decode import Translator
from mt.model import build_model


@pytest.fixture(scope="module")
def demo(tmp_path_factory):
    return demo_model(tmp_path_factory.getbasetemp() / "export_demo")  # trained once, shared with the export tests


def translations(ckpt, lines: list[str], strategy: str, fast: bool) -> list[tuple[str, list[int], float, float]]:
    model, tokenizers, cfg = load_for_inference(ckpt)
    model.decoder.fast_steps = fast
    settings = dataclasses.replace(cfg.decode, strategy=strategy, beam_size=4 if strategy == "beam" else 1, nbest=1)
    translator = Translator(model, tokenizers, settings, max_positions=cfg.model.max_positions)
    return [(t.text, t.hypotheses[0].tokens, t.hypotheses[0].score, t.hypotheses[0].logprob)
            for t in translator.translate_nbest(lines)]


@pytest.mark.parametrize("strategy", ["beam", "greedy"])
def test_fast_path_translates_the_demo_test_set_exactly_like_the_plain_path(demo, strategy: str) -> None:
    fast = translations(demo.ckpt, demo.sources, strategy, fast=True)
    plain = translations(demo.ckpt, demo.sources, strategy, fast=False)
    assert sum(text == ref for (text, *_), ref in zip(fast, demo.references, strict=True)) > len(fast) // 2  # trained
    assert fast == plain  # texts, tokens and float scores, every line


LIMITS = [{}, {"min_len": 5, "max_len_a": 0.0, "max_len_b": 7}]  # the second forces and bans EOS


@pytest.mark.parametrize("limits", LIMITS, ids=["default", "min-max"])
def test_greedy_without_scores_picks_the_same_tokens_and_leaves_scores_nan(demo, limits: dict) -> None:
    model, tokenizers, cfg = load_for_inference(demo.ckpt)
    settings = dataclasses.replace(cfg.decode, strategy="greedy", beam_size=1, nbest=1, **limits)
    translator = Translator(model, tokenizers, settings, max_positions=cfg.model.max_positions)
    scored = translator.translate_nbest(demo.sources)
    bare = translator.translate_nbest(demo.sources, scores=False)
    assert [t.hypotheses[0].tokens for t in bare] == [t.hypotheses[0].tokens for t in scored]
    assert all(math.isnan(t.hypotheses[0].score) and math.isnan(t.hypotheses[0].logprob) for t in bare)
    assert not any(math.isnan(t.hypotheses[0].score) for t in scored)
    assert translator.translate(demo.sources) == [t.text for t in scored]  # text only: no scores needed
    if limits:
        assert {len(t.hypotheses[0].tokens) for t in bare} <= set(range(5, 8))


OPTIONS = [
    {},
    {"pre_ln": True, "positions": "rope", "norm": "rmsnorm"},
    {"activation": "swiglu", "kv_heads": 2, "qk_norm": True, "positions": "learned"},
    {"activation": "gelu", "pre_ln": True},
]


@pytest.mark.parametrize("options", OPTIONS, ids=lambda o: ",".join(o) or "paper")
@torch.inference_mode()
def test_step_equals_the_modules_forward_bit_for_bit(options: dict) -> None:
    torch.manual_seed(0)
    cfg = ModelConfig(encoder_layers=2, decoder_layers=2, d_model=32, d_ff=64, heads=4, dropout=0.1, **options)
    model = build_model(cfg, 64, 64).eval()
    src = torch.randint(4, 64, (3, 7))
    src_pad_mask = torch.zeros_like(src, dtype=torch.bool)
    src_pad_mask[1, 5:] = True
    reorders = [torch.arange(3).repeat_interleave(4), torch.tensor([1, 1, 0, 3, 6, 4, 4, 5, 11, 8, 9, 9])]
    logits = {}
    for fast in (True, False):
        model.decoder.fast_steps = fast
        enc = model.encode(src, src_pad_mask)
        cache = model.new_cache(beams_per_sentence=4)
        tokens = torch.full((3, 1), 2)
        steps = []
        for step in range(5):
            steps.append(model.decode(tokens, enc, cache))
            cache.reorder(reorders[min(step, 1)])
            tokens = torch.randint(4, 64, (12, 1), generator=torch.Generator().manual_seed(step))
        logits[fast] = steps
    assert all(torch.equal(a, b) for a, b in zip(logits[True], logits[False], strict=True))


