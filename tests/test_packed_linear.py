"""Linears packed for oneDNN (``mt.model.packed_linear``) against ``F.linear``: the same products to
float32 rounding, the same state dict, and the same translations of the trained demo model."""

from __future__ import annotations

import dataclasses
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch
import torch.nn.functional as F
from export_helpers import demo_model
from torch import nn

import mt.model.packed_linear as packed_linear_module
from mt.checkpoint import load_for_inference
from mt.config import ModelConfig
from mt.decode import Translator
from mt.model import PackedLinear, bf16_supported, build_model, int8_supported, pack_linears_, packing_supported
from mt.model.packed_linear import ONEDNN_CACHE_ENTRIES, padded_rows

needs_onednn = pytest.mark.skipif(not packing_supported(), reason="this torch has no oneDNN packed linear")


@needs_onednn
@pytest.mark.parametrize("shape", [(5, 48), (1, 48), (3, 7, 48), (2, 1, 48), (8, 48), (70, 48), (3, 23, 48)])
@pytest.mark.parametrize("bias", [True, False])
def test_packed_linear_equals_f_linear(shape: tuple[int, ...], bias: bool) -> None:
    linear = nn.Linear(48, 80, bias=bias).eval()
    x = torch.randn(*shape)
    expected = F.linear(x, linear.weight, linear.bias)
    packed = PackedLinear.from_linear(linear)
    got = packed(x)
    assert got.shape == expected.shape
    torch.testing.assert_close(got, expected, rtol=1e-5, atol=1e-5)
    packed.train()
    assert torch.equal(packed(x), expected)  # training mode: F.linear itself


@needs_onednn
@torch.inference_mode()
def test_packing_keeps_the_state_dict_and_the_logits() -> None:
    torch.manual_seed(0)
    cfg = ModelConfig(encoder_layers=2, decoder_layers=2, d_model=32, d_ff=64, heads=4, pre_ln=True, positions="rope")
    model = build_model(cfg, 64, 64).eval()
    before = {k: v.clone() for k, v in model.state_dict().items()}
    src = torch.randint(4, 64, (3, 7))
    tgt = torch.randint(4, 64, (3, 5))
    pad = torch.zeros_like(src, dtype=torch.bool)
    expected = model(src, pad, tgt)
    linears = sum(type(m) is nn.Linear for m in model.modules())
    assert pack_linears_(model, keep_small=False) == linears + 1  # and the tied output projection
    assert not any(type(m) is nn.Linear for m in model.modules())
    after = model.state_dict()
    assert after.keys() == before.keys() and all(torch.equal(after[k], before[k]) for k in before)
    torch.testing.assert_close(model(src, pad, tgt), expected, rtol=1e-4, atol=1e-4)


@needs_onednn
def test_small_float32_weights_stay_on_f_linear_where_asked() -> None:
    model = nn.Sequential(nn.Linear(128, 384), nn.Linear(512, 512)).eval()  # at and above MKL_MAX_ENTRIES
    assert pack_linears_(model, keep_small=True) == 1
    assert type(model[0]) is nn.Linear and type(model[1]) is PackedLinear
    model = nn.Sequential(nn.Linear(128, 384)).eval()
    if bf16_supported():  # bfloat16 products need the packed path: every weight is packed
        assert pack_linears_(model, torch.bfloat16, keep_small=True) == 1


def test_a_model_off_the_cpu_or_not_in_float32_is_left_unpacked() -> None:
    model = build_model(ModelConfig(encoder_layers=1, decoder_layers=1, d_model=16, d_ff=32, heads=2), 32, 32)
    assert pack_linears_(model.to(torch.bfloat16)) == 0
    assert any(type(m) is nn.Linear for m in model.modules())


@pytest.fixture(scope="module")
def demo(tmp_path_factory):
    return demo_model(tmp_path_factory.getbasetemp() / "export_demo")  # trained once, shared with the export tests


def translations(ckpt, lines: list[str], strategy: str, pack: bool) -> list[tuple[str, list[int], float]]:
    model, tokenizers, cfg = load_for_inference(ckpt, pack=pack)
    settings = dataclasses.replace(cfg.decode, strategy=strategy, beam_size=4 if strategy == "beam" else 1, nbest=1)
    translator = Translator(model, tokenizers, settings, max_positions=cfg.model.max_positions)
    return [(t.text, t.hypotheses[0].tokens, t.hypotheses[0].score) for t in translator.translate_nbest(lines)]


@needs_onednn
@pytest.mark.parametrize("strategy", ["beam", "greedy"])
def test_packed_model_translates_the_demo_test_set_like_the_plain_one(demo, strategy: str, monkeypatch) -> None:
    monkeypatch.setattr(packed_linear_module, "SMALL_WEIGHTS_ON_MKL", False)  # every weight packed
    packed = translations(demo.ckpt, demo.sources, strategy, pack=True)
    plain = translations(demo.ckpt, demo.sources, strategy, pack=False)
    assert [(text, tokens) for text, tokens, _ in packed] == [(text, tokens) for text, tokens, _ in plain]
    for (_, _, a), (_, _, b) in zip(packed, plain, strict=True):
        assert a == pytest.approx(b, rel=1e-5, abs=1e-5)  # the scores, to float32 rounding


needs_bf16 = pytest.mark.skipif(not bf16_supported(), reason="this CPU has no bf16 instructions for oneDNN")


@needs_bf16
def test_bf16_packed_linear_takes_float32_and_gives_float32() -> None:
    linear = nn.Linear(48, 80).eval()
    x = torch.randn(5, 48)
    expected = F.linear(x.bfloat16(), linear.weight.bfloat16(), linear.bias.bfloat16()).float()
    got = PackedLinear.from_linear(linear, torch.bfloat16)(x)
    assert got.dtype == torch.float32
    torch.testing.assert_close(got, expected, rtol=2e-2, atol=2e-2)  # bfloat16 products, summed differently
    assert linear.weight.dtype == torch.float32  # the parameter itself is untouched


@needs_bf16
def test_bf16_packed_model_translates_the_demo_test_set_close_to_float32(demo) -> None:
    model, tokenizers, cfg = load_for_inference(demo.ckpt, pack=True, precision="bf16")
    settings = dataclasses.replace(cfg.decode, strategy="greedy", beam_size=1, nbest=1)
    texts = Translator(model, tokenizers, settings, max_positions=cfg.model.max_positions).translate(demo.sources)
    plain = [text for text, _, _ in translations(demo.ckpt, demo.sources, "greedy", pack=False)]
    same = sum(a == b for a, b in zip(texts, plain, strict=True))
    assert same >= 0.9 * len(plain)  # bf16 products move a few near ties, no more


needs_int8 = pytest.mark.skipif(not (packing_supported() and int8_supported()), reason="no fbgemm int8 kernels")


@needs_int8
@pytest.mark.parametrize("shape", [(5, 48), (1, 48), (3, 7, 48), (2, 1, 48), (70, 48)])
@pytest.mark.parametrize("bias", [True, False])
def test_int8_packed_linear_is_close_to_float32(shape: tuple[int, ...], bias: bool) -> None:
    torch.manual_seed(0)
    linear = nn.Linear(48, 80, bias=bias).eval()
    x = torch.randn(*shape)
    expected = F.linear(x, linear.weight, linear.bias)
    got = PackedLinear.from_linear(linear, torch.qint8)(x)
    assert got.dtype == torch.float32 and got.shape == expected.shape
    # int8 weights (a scale per row) and 7-bit inputs (a scale per call): about 1% of the output's range
    assert (got - expected).abs().max() <= 0.02 * expected.abs().max()
    assert linear.weight.dtype == torch.float32  # the parameter itself is untouched


@needs_int8
def test_int8_packed_model_translates_the_demo_test_set_close_to_float32(demo) -> None:
    model, tokenizers, cfg = load_for_inference(demo.ckpt, pack=True, precision="int8")
    assert not any(type(m) is nn.Linear for m in model.modules())
    assert model.decoder.output_packed is not None and not isinstance(model.decoder.output_packed, torch.Tensor)
    settings = dataclasses.replace(cfg.decode, strategy="greedy", beam_size=1, nbest=1)
    texts = Translator(model, tokenizers, settings, max_positions=cfg.model.max_positions).translate(demo.sources)
    plain = [text for text, _, _ in translations(demo.ckpt, demo.sources, "greedy", pack=False)]
    same = sum(a == b for a, b in zip(texts, plain, strict=True))
    assert same >= 0.8 * len(plain)  # int8 weights move near ties, not the model


def test_int8_without_fbgemm_is_a_clear_error(monkeypatch) -> None:
    import mt.model
    from mt.cli.translate import check_precision
    from mt.errors import UserError

    monkeypatch.setattr(mt.model, "int8_supported", lambda: False)
    with pytest.raises(UserError, match="--precision int8 needs torch's fbgemm int8 kernels"):
        check_precision("int8", torch.device("cpu"))
    with pytest.raises(UserError, match="--precision int8 is for decoding on a CPU"):
        check_precision("int8", torch.device("meta"))


def test_packing_refuses_other_dtypes() -> None:
    model = build_model(ModelConfig(encoder_layers=1, decoder_layers=1, d_model=16, d_ff=32, heads=2), 32, 32)
    with pytest.raises(ValueError, match="float32, bfloat16 or int8"):
        pack_linears_(model, torch.float16)


def test_bf16_on_a_cpu_without_bf16_instructions_is_a_clear_error(monkeypatch) -> None:
    import mt.model
    from mt.cli.translate import check_precision
    from mt.errors import UserError

    check_precision("fp32", torch.device("cpu"))  # nothing to check
    monkeypatch.setattr(mt.model, "bf16_supported", lambda: False)
    with pytest.raises(UserError, match="--precision bf16 needs a CPU with bf16 instructions"):
        check_precision("bf16", torch.device("cpu"))
    with pytest.raises(UserError, match="--precision bf16 is for decoding on a CPU"):
        check_precision("bf16", torch.device("meta"))


def test_padded_rows_are_few_sizes_at_most_an_eighth_above() -> None:
    sizes = [padded_rows(rows) for rows in range(1, 8193)]
    for rows, size in enumerate(sizes, start=1):
        assert rows <= size <= max(rows + 7, rows * 9 // 8)
        assert padded_rows(size) == size  # a size is its own size
    assert sizes == sorted(sizes)
    assert len(set(sizes[:4096])) == 8 + 6 * 8  # multiples of 8 up to 64, then 8 an octave
    assert [padded_rows(rows) for rows in (1, 9, 64, 65, 200, 1000, 1025)] == [8, 16, 64, 72, 208, 1024, 1152]


ROW_COUNTS_PROBE = """
import os, sys, torch
from torch import nn
from mt.model import pack_linears_
from mt.model.packed_linear import packed_product
def rss_mib():
    for line in open("/proc/self/status"):
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
model = nn.Sequential(nn.Linear(128, 384)).eval()
pack_linears_(model, keep_small=False)
product = model if sys.argv[1] == "padded" else lambda x: packed_product(x, model[0].packed, model[0].packed_bias)
with torch.inference_mode():
    model(torch.randn(3, 128))
    start = rss_mib()
    for rows in range(1, 401):  # every row count, as a server meets them
        product(torch.randn(rows, 128))
print(os.environ["ONEDNN_PRIMITIVE_CACHE_CAPACITY"], os.environ["LRU_CACHE_CAPACITY"], rss_mib() - start)
"""


@needs_onednn
@pytest.mark.skipif(not Path("/proc/self/status").exists(), reason="reads RSS from /proc")
@pytest.mark.parametrize(("user_capacity", "rows"), [(None, "padded"), (None, "exact"), ("16", "exact")])
def test_onednn_kernels_are_few_and_their_caches_bounded_in_a_fresh_process(user_capacity: str | None,
                                                                            rows: str) -> None:
    # regression: oneDNN kept a kernel for every row count (400 row counts of one linear: ~250 MiB more RSS).
    # Products now run at a few padded row counts, and packing bounds both caches first (a capacity from
    # the environment wins, and is obeyed)
    env = {k: v for k, v in os.environ.items() if k not in ("ONEDNN_PRIMITIVE_CACHE_CAPACITY", "LRU_CACHE_CAPACITY")}
    if user_capacity is not None:
        env["ONEDNN_PRIMITIVE_CACHE_CAPACITY"] = env["LRU_CACHE_CAPACITY"] = user_capacity
    env["PYTHONPATH"] = str(Path(__file__).resolve().parents[1])
    done = subprocess.run([sys.executable, "-c", ROW_COUNTS_PROBE, rows], env=env, capture_output=True, text=True,
                          check=True)
    primitive, lru, growth_mib = done.stdout.split()
    assert primitive == lru == (user_capacity or str(ONEDNN_CACHE_ENTRIES))
    if rows == "padded" or user_capacity is not None:
        assert float(growth_mib) < 60  # 29 padded row counts, or 16 kernels kept: read before the first kernel
