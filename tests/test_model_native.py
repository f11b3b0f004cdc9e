"""The C++ decoding step (``mt.model.native``) against the Python step it replaces: the same hidden states
within float32 rounding, the same greedy translations (plain and continuous batching, on the trained demo
model and on random models), and the options and calls it leaves to Python."""

from __future__ import annotations

import dataclasses
import math
import shutil
from collections import Counter

import pytest
import torch
from export_helpers import demo_model, demo_sources, untrained_checkpoint
from helpers import decode_beam_store
from torch import Tensor

from mt.checkpoint import load_for_inference
from mt.config import DecodeConfig, ModelConfig
from mt.decode import Translator
from mt.decode import beam as beam_module
from mt.decode.common import argmax_rows
from mt.decode.greedy import decode_single_path
from mt.decode.refill import SentenceQueue
from mt.decode.stopping import Finished
from mt.model import build_model
from mt.model.cache import DecoderCache
from mt.model.native import NativeSteps, load_native, unsupported

pytestmark = pytest.mark.skipif(shutil.which("c++") is None, reason="no C++ compiler to build the C++ step")

COVERED = [{}, {"pre_ln": True}, {"pre_ln": True, "norm": "rmsnorm"}, {"norm": "rmsnorm", "positions": "learned"},
           {"activation": "silu"}, {"pre_ln": True, "activation": "gelu"},
           {"pre_ln": True, "positions": "rope"}]  # the last: the multi30k_en_de preset's options
NOT_COVERED = [
    ({"qk_norm": True}, "qk-norm"),
    ({"kv_heads": 2}, "grouped-query attention"),
    ({"activation": "swiglu"}, "SwiGLU"),
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


def test_a_tanh_gelu_is_named_and_left_to_python() -> None:
    model = random_model(activation="gelu")
    for stack in (model.encoder, model.decoder):
        for layer in stack.layers:
            layer.ffn.activation = torch.nn.GELU(approximate="tanh")
        assert "an activation other than ReLU, SiLU or GELU" in stack.use_native()
        assert stack.native is None


@torch.inference_mode()
def test_opus_mt_options_silu_and_a_logits_bias_run_every_step_in_cpp(native) -> None:
    """SiLU (OPUS-MT's swish) and a logits bias: nothing left to Python, both C++ searches take the model."""
    model = random_model(activation="silu", logits_bias=True)
    assert unsupported(model.encoder) is None and unsupported(model.decoder) is None
    assert model.encoder.use_native() is None and model.decoder.use_native() is None
    src = torch.randint(4, 64, (2, 5))
    enc = model.encode(src, torch.zeros_like(src, dtype=torch.bool))
    assert model.native_greedy(enc, [5, 5], [0, 0], None, (0, 2, 3), True) is not None
    assert model.native_beam(enc, [5, 5], [0, 0], None, (0, 2, 3), 2, 1, 0, 0.0, 0) is not None


def fed_logits(model, native, use: bool, src: Tensor, pad: Tensor, steps: int = 40) -> Tensor:
    """The logits (B, steps, V) of ``steps`` cached steps fed the same random tokens, with the C++ step (``use``)
    or the Python one."""
    tokens = torch.randint(4, 64, (steps, src.size(0), 1), generator=torch.Generator().manual_seed(1))
    model.decoder.native = NativeSteps(model.decoder, native) if use else None
    enc, cache = model.encode(src, pad), model.new_cache()
    return torch.cat([model.decode(tokens[t], enc, cache) for t in range(steps)], dim=1)


@pytest.mark.parametrize("options", COVERED, ids=lambda o: ",".join(f"{k}={v}" for k, v in o.items()) or "paper")
@torch.inference_mode()
def test_cpp_step_decodes_like_the_python_step(native, options: dict) -> None:
    """40 greedy steps (past the cache's first capacity of 32) of 3 sentences, one with padding, fed the
    same tokens: every step's logits within 1e-4 of the Python step's, and the same argmax."""
    model = random_model(**options)
    src = torch.randint(4, 64, (3, 9))
    pad = torch.zeros_like(src, dtype=torch.bool)
    pad[1, 6:] = True
    logits = {use: fed_logits(model, native, use, src, pad) for use in (False, True)}  # (3, 40, V) each
    assert torch.allclose(logits[True], logits[False], atol=1e-4, rtol=0)
    assert torch.equal(logits[True].argmax(-1), logits[False].argmax(-1))


@pytest.mark.parametrize("activation", ["silu", "gelu"])
@torch.inference_mode()
def test_cpp_activations_match_torch_far_from_zero(native, activation: str) -> None:
    """fc1's weights x 20, so that the activations see inputs of +-30 and more (exp's underflow, erf near +-1):
    the C++ encoder and decoder steps within float32 rounding of the Python layers."""
    model = random_model(activation=activation)
    for layer in (*model.encoder.layers, *model.decoder.layers):
        layer.ffn.fc1.weight.mul_(20)
    src = torch.randint(4, 64, (3, 9))
    pad = torch.zeros_like(src, dtype=torch.bool)
    pad[1, 6:] = True
    plain = model.encode(src, pad).out  # (3, 9, D), normalised (Post-LN)
    assert model.encoder.layers[-1].ffn.fc1(plain).abs().max() > 30
    logits = {use: fed_logits(model, native, use, src, pad, steps=8) for use in (False, True)}
    assert model.encoder.use_native() is None
    assert torch.allclose(model.encode(src, pad).out, plain, atol=1e-5, rtol=0)
    assert torch.allclose(logits[True], logits[False], atol=1e-4, rtol=0)


@pytest.mark.parametrize("options", [COVERED[0], COVERED[-1]], ids=["paper", "pre_ln,rope"])
@torch.inference_mode()
def test_cpp_step_decodes_beam_stores_like_the_python_step(native, options: dict) -> None:
    """A beam store (3 sentences x 3 beams, slots read through the slot table): fan-out, beams swapping and
    repeating within a sentence, a sentence leaving; the same logits within 1e-4 at every step."""
    model = random_model(**options)
    src = torch.randint(4, 64, (3, 6))
    logits = {}
    for use in (False, True):
        model.decoder.native = NativeSteps(model.decoder, native) if use else None
        logits[use] = decode_beam_store(model, src)
    for fast, plain in zip(logits[True], logits[False], strict=True):
        assert torch.allclose(fast, plain, atol=1e-4, rtol=0)


GREEDY_LIMITS = {  # per sentence: pieces at most, pieces before EOS is allowed; ids at or past vocab_size banned
    "limits": dict(max_len=[3, 9, 14, 6], min_len=[0, 0, 0, 0], vocab_size=None),
    "min_len": dict(max_len=[8, 8, 30, 5], min_len=[2, 8, 6, 5], vocab_size=None),
    "vocab_size": dict(max_len=[12, 4, 9, 20], min_len=[1, 0, 0, 3], vocab_size=50),
}


def greedy_outputs(model, src, pad, scores: bool, native: bool, limits: dict) -> list[tuple[list[int], float]]:
    heard: list[int] = []
    found = decode_single_path(model, src, pad, argmax_rows, penalty="none", alpha=0.0, scores=scores, native=native,
                               on_done=lambda done: heard.extend(sent for sent, _ in done), **limits)
    assert sorted(heard) == list(range(src.size(0)))  # every sentence reported once
    return [(hyps[0].tokens, hyps[0].score) for hyps in found]


@pytest.mark.parametrize("limits", GREEDY_LIMITS.values(), ids=GREEDY_LIMITS.keys())
@pytest.mark.parametrize("packed", [True, False], ids=["packed", "unpacked"])
@pytest.mark.parametrize("options", COVERED, ids=lambda o: ",".join(f"{k}={v}" for k, v in o.items()) or "paper")
@torch.inference_mode()
def test_cpp_greedy_loop_decodes_like_the_python_loop(native, options: dict, packed: bool, limits: dict) -> None:
    """A batch of 4 sentences (two with padding) decoded whole by the C++ greedy loop and by mt.decode.greedy's
    Python loop over the C++ step: the same tokens (EOS forced at each sentence's limit, banned before its
    minimum, no id at or past vocab_size), log-prob scores within float32 rounding, NaN without scores."""
    model = random_model(seed=3, **options)
    if packed:
        model.decoder.pack_output()
    model.decoder.native = NativeSteps(model.decoder, native)
    src = torch.randint(4, 64, (4, 10), generator=torch.Generator().manual_seed(2))
    pad = torch.zeros_like(src, dtype=torch.bool)
    pad[1, 7:], pad[3, 4:] = True, True
    enc = model.encode(src, pad)
    assert model.native_greedy(enc, limits["max_len"], limits["min_len"], None, (0, 2, 3), True) is not None
    for scores in (True, False):
        fast = greedy_outputs(model, src, pad, scores, native=True, limits=limits)
        plain = greedy_outputs(model, src, pad, scores, native=False, limits=limits)
        assert [tokens for tokens, _ in fast] == [tokens for tokens, _ in plain]
        for (tokens, score), (_, reference), longest, shortest in zip(
            fast, plain, limits["max_len"], limits["min_len"], strict=True
        ):
            assert shortest <= len(tokens) <= longest and 3 not in tokens
            assert all(t not in (0, 2) and t < (limits["vocab_size"] or 64) for t in tokens)
            if scores:  # float32 rounding of summed log-probs (random models: scores of -40 and below)
                assert score == pytest.approx(reference, rel=1e-6, abs=1e-5)
            else:
                assert math.isnan(score) and math.isnan(reference)


BEAM_SETTINGS = {  # (beam, nbest, length penalty, alpha, stopping rule)
    "gnmt,topk_eos": (4, 1, "gnmt", 0.6, "topk_eos"),
    "length,exact,nbest3": (3, 3, "length", 1.0, "exact"),
    "none,fairseq,nbest2": (5, 2, "none", 0.0, "fairseq"),
    "gnmt-negative,exact": (2, 1, "gnmt", -0.5, "exact"),
}


def beam_outputs(model, src, pad, native: bool, limits: dict, settings: tuple) -> list[list[tuple[list[int], float]]]:
    beam, nbest, penalty, alpha, stopping = settings
    max_len, min_len = limits["max_len"], limits["min_len"]
    cfg = DecodeConfig(strategy="beam", beam_size=beam, nbest=nbest, length_penalty=penalty, alpha=alpha,
                       stopping=stopping, max_len_a=0.0, max_len_b=max(max_len), min_len=0)
    finished = Finished(max_len, min_len, beam=beam, nbest=nbest, penalty=penalty, alpha=alpha, stopping=stopping)
    heard: list[int] = []
    queue = SentenceQueue(src, pad)
    active = queue.take(0)
    enc = queue.encoded(model.encode, active)
    on_done = lambda done: heard.extend(sent for sent, _ in done)  # noqa: E731
    if not (native and beam_module._decode_native(model, enc, active, finished, cfg, limits["vocab_size"], on_done)):
        beam_module._decode_beams(model, queue, active, enc, finished, beam, limits["vocab_size"], on_done)
    assert sorted(heard) == list(range(src.size(0)))  # every sentence reported once
    return [[(h.tokens, h.score) for h in finished.nbest(s)] for s in range(src.size(0))]


@pytest.mark.parametrize("settings", BEAM_SETTINGS.values(), ids=BEAM_SETTINGS.keys())
@pytest.mark.parametrize("limits", GREEDY_LIMITS.values(), ids=GREEDY_LIMITS.keys())
@pytest.mark.parametrize("options", [COVERED[0], COVERED[2], COVERED[4], COVERED[-1]],
                         ids=["paper", "pre_ln,rmsnorm", "silu", "pre_ln,rope"])
@torch.inference_mode()
def test_cpp_beam_loop_decodes_like_the_python_loop(native, options: dict, limits: dict, settings: tuple) -> None:
    """A batch of 4 sentences decoded whole by the C++ beam loop and by mt.decode.beam's Python loop over the C++
    step, under each stopping rule and length penalty: the same n-best tokens, scores within float32 rounding."""
    model = random_model(seed=5, **options)
    model.decoder.pack_output()
    model.decoder.native = NativeSteps(model.decoder, native)
    src = torch.randint(4, 64, (4, 10), generator=torch.Generator().manual_seed(6))
    pad = torch.zeros_like(src, dtype=torch.bool)
    pad[0, 5:], pad[2, 8:] = True, True
    fast = beam_outputs(model, src, pad, True, limits, settings)
    plain = beam_outputs(model, src, pad, False, limits, settings)
    assert [[tokens for tokens, _ in nbest] for nbest in fast] == [[tokens for tokens, _ in nbest] for nbest in plain]
    for nbest, reference in zip(fast, plain, strict=True):
        assert len(nbest) == settings[1]
        # float32 rounding of log-probs summed over up to 30 steps (random models: scores of -100 and below)
        assert [score for _, score in nbest] == pytest.approx([score for _, score in reference], rel=1e-6, abs=1e-5)


def fill_logits_bias(model, src, pad, limits: dict) -> set[int]:
    """Random values in ``model``'s logits bias (V,), then -inf at three ids: the first token greedy search
    picks for sentence 0 with those values (an argmax the bias takes away), the token it picks most, and 9."""
    bias = model.decoder.logits_bias
    bias.copy_(torch.randn(bias.shape, generator=torch.Generator().manual_seed(7)))
    picked = [tokens for tokens, _ in greedy_outputs(model, src, pad, True, native=False, limits=limits)]
    banned = {picked[0][0], Counter(t for tokens in picked for t in tokens).most_common(1)[0][0], 9}
    bias[sorted(banned)] = -math.inf
    return banned


@pytest.mark.parametrize("packed", [True, False], ids=["packed", "unpacked"])
@pytest.mark.parametrize("options", [{}, {"activation": "silu", "pre_ln": True}], ids=["paper", "silu,pre_ln"])
@torch.inference_mode()
def test_cpp_searches_decode_with_a_logits_bias_like_python(native, options: dict, packed: bool) -> None:
    """A logits bias with -inf entries, one of them an argmax without it: the C++ greedy and beam searches and the
    Python loops over the C++ step and over the Python step give the same tokens, never an id the bias makes
    -inf, and scores within float32 rounding (finite: the -inf ids take no probability)."""
    model = random_model(seed=3, logits_bias=True, **options)
    src = torch.randint(4, 64, (4, 10), generator=torch.Generator().manual_seed(2))
    pad = torch.zeros_like(src, dtype=torch.bool)
    pad[1, 7:], pad[3, 4:] = True, True
    limits = GREEDY_LIMITS["min_len"]
    banned = fill_logits_bias(model, src, pad, limits)
    if packed:
        model.decoder.pack_output()
    found = {}
    for path in ("C++ search", "C++ step", "Python step"):
        model.decoder.native = NativeSteps(model.decoder, native) if path != "Python step" else None
        search = path == "C++ search"
        if search:
            enc = model.encode(src, pad)
            assert model.native_greedy(enc, limits["max_len"], limits["min_len"], None, (0, 2, 3), True) is not None
            assert model.native_beam(enc, limits["max_len"], limits["min_len"], None, (0, 2, 3), 4, 1, 1, 0.6,
                                     1) is not None
        greedy = [[output] for output in greedy_outputs(model, src, pad, True, native=search, limits=limits)]
        bare = [[output] for output in greedy_outputs(model, src, pad, False, native=search, limits=limits)]
        beams = [beam_outputs(model, src, pad, search, limits, BEAM_SETTINGS[name])
                 for name in ("gnmt,topk_eos", "length,exact,nbest3")]
        found[path] = [greedy, bare, *beams]  # per search: per sentence, its (tokens, score) hypotheses
    tokens = {path: [t for out in outs for hyps in out for t, _ in hyps] for path, outs in found.items()}
    scores = {path: [s for out in outs for hyps in out for _, s in hyps] for path, outs in found.items()}
    assert tokens["C++ search"] == tokens["C++ step"] == tokens["Python step"]
    assert not banned & {t for hyp in tokens["C++ search"] for t in hyp}
    assert sum(math.isnan(s) for s in scores["C++ search"]) == len(src)  # greedy without scores; the rest finite
    assert all(math.isfinite(s) for s in scores["C++ search"] if not math.isnan(s))
    assert scores["C++ search"] == pytest.approx(scores["C++ step"], rel=1e-6, abs=1e-5, nan_ok=True)
    assert scores["C++ search"] == pytest.approx(scores["Python step"], rel=1e-4, abs=1e-4, nan_ok=True)


def test_cpp_greedy_loop_leaves_what_it_does_not_take_to_python(native) -> None:
    """An output longer than the position table, training mode, autograd on: no C++ loop (None)."""
    model = random_model(seed=4)
    model.decoder.native = NativeSteps(model.decoder, native)
    src = torch.randint(4, 64, (2, 5))
    pad = torch.zeros_like(src, dtype=torch.bool)
    with torch.inference_mode():
        enc = model.encode(src, pad)
        assert model.native_greedy(enc, [5, 5], [0, 0], None, (0, 2, 3), False) is not None
        too_long = model.decoder.embedding.positions.table.size(0)
        assert model.native_greedy(enc, [too_long, 5], [0, 0], None, (0, 2, 3), False) is None
        model.train()
        assert model.native_greedy(enc, [5, 5], [0, 0], None, (0, 2, 3), False) is None
    model.eval()
    enc = model.encode(src, pad)
    assert model.native_greedy(enc, [5, 5], [0, 0], None, (0, 2, 3), False) is None  # autograd on
    with torch.no_grad():
        assert model.native_greedy(enc, [5, 5], [0, 0], None, (0, 2, 3), False) is not None


COVERED_OVERRIDES = [[], ["model.pre_ln=true"], ["model.pre_ln=true", "model.norm=rmsnorm"],
                     ["model.norm=rmsnorm", "model.positions=learned"], ["model.pre_ln=true", "model.positions=rope"]]


@pytest.mark.parametrize(("strategy", "refill"), [("greedy", "greedy"), ("greedy", "none"), ("beam", "all"),
                                                  ("beam", "none")])
def test_cpp_step_translates_like_the_python_step_with_and_without_refill(native, tmp_path, strategy, refill) -> None:
    """Random models (each covered option set) whose batches of 3 sentences refill as sentences finish:
    rows at different steps in one call; the same tokens as the Python step."""
    for k, overrides in enumerate(COVERED_OVERRIDES):
        ckpt = untrained_checkpoint(tmp_path / f"random_{k}.pt", *overrides)
        outputs = {}
        for use in (False, True):
            model, tokenizers, cfg = load_for_inference(ckpt, pack=True, native=use)
            assert (model.decoder.native is not None) == use
            settings = dataclasses.replace(cfg.decode, strategy=strategy, beam_size=1 if strategy == "greedy" else 4,
                                           max_sentences=3, refill=refill)
            translator = Translator(model, tokenizers, settings, max_positions=cfg.model.max_positions)
            outputs[use] = [t.hypotheses[0].tokens for t in translator.translate_nbest(demo_sources(17))]
        assert len({len(tokens) for tokens in outputs[True]}) > 1  # rows finish at different steps
        assert outputs[True] == outputs[False], overrides


@pytest.fixture(scope="module")
def demo(tmp_path_factory):
    return demo_model(tmp_path_factory.getbasetemp() / "export_demo")  # trained once, shared with the export tests


@pytest.mark.parametrize("strategy", ["greedy", "beam"])
def test_packed_inference_models_decode_in_cpp_exactly_like_python_on_the_demo_test_set(demo, strategy) -> None:
    texts = {}
    for native in (False, True):
        model, tokenizers, cfg = load_for_inference(demo.ckpt, pack=True, native=native)
        assert (model.decoder.native is not None) == native
        settings = dataclasses.replace(cfg.decode, strategy=strategy, beam_size=1 if strategy == "greedy" else 4,
                                       nbest=1)
        translator = Translator(model, tokenizers, settings, max_positions=cfg.model.max_positions)
        texts[native] = [(t.text, t.hypotheses[0].tokens) for t in translator.translate_nbest(demo.sources)]
    right = sum(text == ref for (text, _), ref in zip(texts[True], demo.references, strict=True))
    assert right > len(demo.sources) // 2  # a trained model
    assert texts[True] == texts[False]


@torch.inference_mode()
def test_row_mover_moves_rows_like_the_python_moves(native) -> None:
    """A cache whose last rows fill the places of finished ones (``fill_from_the_end``): the C++ mover and
    the Python moves leave the same buffers, every layer and store."""
    model = random_model()
    src = torch.randint(4, 64, (6, 5))
    caches = {}
    for use in (False, True):  # the Python step both times: only the moves differ
        enc = model.encode(src, torch.zeros_like(src, dtype=torch.bool))
        cache = DecoderCache(len(model.decoder.layers), native.move_rows if use else None)
        for step in range(3):
            model.decode(torch.full((6, 1), 4 + step), enc, cache)
        cache.reorder(torch.tensor([0, 5, 2, 4]))  # rows 1 and 3 ended: 5 and 4 take their places
        caches[use] = cache
    for plain, moved in zip(caches[False].layers, caches[True].layers, strict=True):
        assert torch.equal(plain.self_attn.view()[0], moved.self_attn.view()[0])
        assert torch.equal(plain.self_attn.view()[1], moved.self_attn.view()[1])
        assert torch.equal(plain.cross_k, moved.cross_k) and torch.equal(plain.cross_v, moved.cross_v)


def test_row_mover_refuses_rows_out_of_range(native) -> None:
    store = torch.zeros(3, 2, 4, 8)
    with pytest.raises(RuntimeError, match="row index out of range"):
        native.move_rows([store], [4], torch.tensor([0]), torch.tensor([3]))


@pytest.mark.parametrize("options", COVERED, ids=lambda o: ",".join(f"{k}={v}" for k, v in o.items()) or "paper")
@torch.inference_mode()
def test_cpp_encoder_encodes_like_the_python_layers(native, options: dict) -> None:
    """3 sentences, two with padding: every position (padding included) within 1e-5 of the Python layers."""
    model = random_model(**options)
    src = torch.randint(4, 64, (3, 9))
    pad = torch.zeros_like(src, dtype=torch.bool)
    pad[1, 6:] = True
    pad[2, 2:] = True
    plain = model.encode(src, pad).out
    assert model.encoder.use_native() is None
    fast = model.encode(src, pad).out
    assert torch.allclose(fast, plain, atol=1e-5, rtol=0)
    with torch.enable_grad():  # autograd: the Python layers
        assert not model.encoder.native.takes(torch.zeros(1, 1, 32))


@pytest.mark.parametrize(("options", "named"), NOT_COVERED[:2], ids=["qk_norm", "gqa"])
def test_encoder_options_the_cpp_code_does_not_cover_are_named(options: dict, named: str) -> None:
    model = random_model(**options)
    assert named in model.encoder.use_native()
    assert model.encoder.native is None


def test_without_a_build_the_model_keeps_python_and_says_why(monkeypatch) -> None:
    """No compiler (the build fails): a one-line warning, ``use_native`` says so, decoding stays in Python."""
    import torch.utils.cpp_extension

    def no_compiler(*args, **kwargs):
        raise RuntimeError("Error building extension: c++: not found")

    monkeypatch.setattr(torch.utils.cpp_extension, "load", no_compiler)
    load_native.cache_clear()
    try:
        with pytest.warns(UserWarning, match="could not be built .*not found.*Python"):
            assert load_native() is None
        model = random_model()
        assert model.decoder.use_native() == "the C++ code could not be built"
        assert model.encoder.use_native() == "the C++ code could not be built"
        assert model.decoder.native is None and model.encoder.native is None
    finally:
        load_native.cache_clear()  # the next caller builds (or finds) the real extension
