"""The C++ decoding step (``mt.model.native``) against the Python step it replaces: the same hidden states
within float32 rounding, the same greedy translations (plain and continuous batching, on the trained demo
model and on random models), and the options and calls it leaves to Python."""

from __future__ import annotations

import dataclasses
import shutil

import pytest
import torch
from export_helpers import demo_model, demo_sources, untrained_checkpoint

from mt.checkpoint import load_for_inference
from mt.config import ModelConfig
from mt.decode import Translator
from mt.model import build_model
from mt.model.native import NativeSteps, load_native, unsupported

pytestmark = pytest.mark.skipif(shutil.which("c++") is None, reason="no C++ compiler to build the C++ step")

COVERED = [{}, {"pre_ln": True}, {"pre_ln": True, "norm": "rmsnorm"}, {"norm": "rmsnorm", "positions": "learned"}]
NOT_COVERED = [
    ({"positions": "rope"}, "rotary positions"),
    ({"qk_norm": True}, "qk-norm"),
    ({"kv_heads": 2}, "grouped-query attention"),
    ({"activation": "swiglu"}, "an activation other than ReLU"),
    ({"activation": "gelu"}, "an activation other than ReLU"),
]


@pytest.fixture(scope="module")
def native():
    module = load_native()
    assert module is not None, "a C++ compiler is here, so the C++ step must build"
    return module


def random_model(seed: int = 0, **options) -> torch.nn.Module:
    torch.manual_seed(seed)
    cfg = ModelConfig(encoder_layers=2, decoder_layers=3, d_model=32, d_ff=64, heads=4, dropout=0.1, **options)
    return build_model(cfg, 64, 64).eval()


@pytest.mark.parametrize(("options", "named"), NOT_COVERED, ids=lambda o: ",".join(o) if isinstance(o, dict) else "")
def test_options_the_cpp_step_does_not_cover_are_named_and_left_to_python(options: dict, named: str) -> None:
    model = random_model(**options)
    assert named in unsupported(model.decoder)
    assert named in model.decoder.use_native()
    assert model.decoder.native is None


@pytest.mark.parametrize("options", COVERED, ids=lambda o: ",".join(f"{k}={v}" for k, v in o.items()) or "paper")
@torch.inference_mode()
def test_cpp_step_decodes_like_the_python_step(native, options: dict) -> None:
    """40 greedy steps (past the cache's first capacity of 32) of 3 sentences, one with padding, fed the
    same tokens: every step's logits within 1e-4 of the Python step's, and the same argmax."""
    model = random_model(**options)
    src = torch.randint(4, 64, (3, 9))
    pad = torch.zeros_like(src, dtype=torch.bool)
    pad[1, 6:] = True
    tokens = torch.randint(4, 64, (40, 3, 1), generator=torch.Generator().manual_seed(1))
    logits = {}
    for use in (False, True):
        model.decoder.native = NativeSteps(model.decoder, native) if use else None
        enc, cache = model.encode(src, pad), model.new_cache()
        logits[use] = torch.cat([model.decode(tokens[t], enc, cache) for t in range(40)], dim=1)  # (3, 40, V)
    assert torch.allclose(logits[True], logits[False], atol=1e-4, rtol=0)
    assert torch.equal(logits[True].argmax(-1), logits[False].argmax(-1))


@torch.inference_mode()
def test_cpp_step_leaves_beam_search_to_python(native, monkeypatch) -> None:
    model = random_model()
    assert model.decoder.use_native() is None
    calls = []
    monkeypatch.setattr(NativeSteps, "__call__", lambda self, x, steps: calls.append(x) or x)
    enc = model.encode(torch.randint(4, 64, (2, 5)), torch.zeros(2, 5, dtype=torch.bool))
    cache = model.new_cache(beams_per_sentence=3)
    model.decode(torch.full((2, 1), 2), enc, cache)
    cache.reorder(torch.arange(2).repeat_interleave(3))
    model.decode(torch.full((6, 1), 5), enc, cache)
    assert not calls
    plain = model.new_cache()
    model.decode(torch.full((2, 1), 2), enc, plain)  # a cache's first call: Python
    model.decode(torch.full((2, 1), 5), enc, plain)
    assert len(calls) == 1


COVERED_OVERRIDES = [[], ["model.pre_ln=true"], ["model.pre_ln=true", "model.norm=rmsnorm"],
                     ["model.norm=rmsnorm", "model.positions=learned"]]


@pytest.mark.parametrize("refill", ["greedy", "none"])
def test_cpp_step_translates_like_the_python_step_with_and_without_refill(native, tmp_path, refill: str) -> None:
    """Random models (each covered option set) whose batches of 3 sentences refill as sentences finish:
    rows at different steps in one call; the same tokens as the Python step."""
    for k, overrides in enumerate(COVERED_OVERRIDES):
        ckpt = untrained_checkpoint(tmp_path / f"random_{k}.pt", *overrides)
        outputs = {}
        for use in (False, True):
            model, tokenizers, cfg = load_for_inference(ckpt, pack=True, native=use)
            assert (model.decoder.native is not None) == use
            settings = dataclasses.replace(cfg.decode, strategy="greedy", beam_size=1, max_sentences=3, refill=refill)
            translator = Translator(model, tokenizers, settings, max_positions=cfg.model.max_positions)
            outputs[use] = [t.hypotheses[0].tokens for t in translator.translate_nbest(demo_sources(17))]
        assert len({len(tokens) for tokens in outputs[True]}) > 1  # rows finish at different steps
        assert outputs[True] == outputs[False], overrides


@pytest.fixture(scope="module")
def demo(tmp_path_factory):
    return demo_model(tmp_path_factory.getbasetemp() / "export_demo")  # trained once, shared with the export tests


def test_packed_inference_models_decode_greedy_in_cpp_exactly_like_python_on_the_demo_test_set(demo) -> None:
    texts = {}
    for native in (False, True):
        model, tokenizers, cfg = load_for_inference(demo.ckpt, pack=True, native=native)
        assert (model.decoder.native is not None) == native
        settings = dataclasses.replace(cfg.decode, strategy="greedy", beam_size=1, nbest=1)
        translator = Translator(model, tokenizers, settings, max_positions=cfg.model.max_positions)
        texts[native] = [(t.text, t.hypotheses[0].tokens) for t in translator.translate_nbest(demo.sources)]
    right = sum(text == ref for (text, _), ref in zip(texts[True], demo.references, strict=True))
    assert right > len(demo.sources) // 2  # a trained model
    assert texts[True] == texts[False]
