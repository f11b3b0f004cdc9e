"""Scaled dot-product and multi-head attention: worked example, masks, fast path = reference path."""

import importlib

import pytest
import torch

from mt.model import DecoderCache, EncoderOut, MultiHeadAttention, attention, causal_mask

attention_module = importlib.import_module("mt.model.attention")  # the package's `attention` is the function

Q = [[1.0, 0.0], [0.0, 1.0], [1.0, 0.1]]
K = [[1.0, 0.0], [0.0, 1.0], [1.0, 0.0]]
V = [[1.0, 0.0], [0.0, 2.0], [1.0, 0.0]]
WEIGHTS = [[0.4011, 0.1978, 0.4011], [0.2483, 0.5035, 0.2483], [0.3954, 0.2092, 0.3954]]
OUTPUT = [[0.8022, 0.3956], [0.4965, 1.0070], [0.7908, 0.4185]]


def _t(rows: list[list[float]]) -> torch.Tensor:
    return torch.tensor(rows)[None, None]  # (1, 1, 3, 2): one sentence, one head


@pytest.mark.parametrize("need_weights", [False, True], ids=["fast", "reference"])
def test_worked_example(need_weights: bool) -> None:
    with torch.no_grad():  # inference: the fused kernel unless need_weights
        out, weights = attention(_t(Q), _t(K), _t(V), need_weights=need_weights)
    assert out.shape == (1, 1, 3, 2)
    assert torch.allclose(out[0, 0].round(decimals=4), torch.tensor(OUTPUT), atol=1e-6)
    if need_weights:
        assert weights is not None and weights.shape == (1, 1, 3, 3)
        assert torch.allclose(weights[0, 0].round(decimals=4), torch.tensor(WEIGHTS), atol=1e-6)
    else:
        assert weights is None


def _qkv(
    batch: int = 3, heads: int = 2, queries: int = 5, keys: int = 7, dh: int = 8
) -> tuple[torch.Tensor, ...]:
    return tuple(torch.randn(batch, heads, n, dh) for n in (queries, keys, keys))


def _key_mask(lengths: list[int], keys: int) -> torch.Tensor:
    """(B, 1, 1, S), True = may attend."""
    return (torch.arange(keys)[None, :] < torch.tensor(lengths)[:, None])[:, None, None, :]


def test_weights_sum_to_one_and_are_exactly_zero_on_masked_keys() -> None:
    q, k, v = _qkv()
    mask = _key_mask([7, 4, 1], 7)
    _, weights = attention(q, k, v, mask, need_weights=True)
    assert weights is not None and weights.shape == (3, 2, 5, 7)
    assert torch.allclose(weights.sum(-1), torch.ones(3, 2, 5), atol=1e-6)
    assert (weights.masked_select(~mask.expand_as(weights)) == 0).all()
    assert (weights.masked_select(mask.expand_as(weights)) > 0).all()


def test_causal_weights_are_zero_above_the_diagonal() -> None:
    q, k, v = _qkv(queries=6, keys=6)
    _, weights = attention(q, k, v, is_causal=True, need_weights=True)
    assert weights is not None
    assert (weights.triu(diagonal=1) == 0).all()
    assert torch.allclose(weights.sum(-1), torch.ones(3, 2, 6), atol=1e-6)


def test_causal_mask_is_bottom_right_aligned() -> None:
    assert causal_mask(2, 4).tolist() == [[True, True, True, False], [True, True, True, True]]
    assert causal_mask(3, 3).equal(torch.ones(3, 3, dtype=torch.bool).tril())


@pytest.mark.parametrize(
    ("queries", "keys", "padded", "is_causal"),
    [(5, 7, True, False), (6, 6, False, True), (6, 6, True, True), (2, 6, False, True), (1, 6, True, True)],
    ids=["padding", "causal", "padding+causal", "causal-cached-chunk", "single-query"],
)
@pytest.mark.parametrize("max_scores", [0, 4096], ids=["fused-kernel", "matmuls"])
def test_fast_path_equals_reference_path(
    queries: int, keys: int, padded: bool, is_causal: bool, max_scores: int, monkeypatch
) -> None:
    monkeypatch.setattr(attention_module, "MATMUL_MAX_SCORES", max_scores)
    q, k, v = _qkv(queries=queries, keys=keys)
    mask = _key_mask([keys, keys - 2, 3], keys) if padded else None
    with torch.no_grad():  # inference: the fused kernel, or matmuls for small problems
        fast, _ = attention(q, k, v, mask, is_causal=is_causal)
    reference, _ = attention(q, k, v, mask, is_causal=is_causal, need_weights=True)
    assert torch.allclose(fast, reference, atol=1e-5)


@pytest.mark.parametrize("max_keys", [0, 64], ids=["fused-kernel", "matmuls"])
def test_fully_masked_row_gives_zeros_not_nan_on_both_paths(max_keys: int, monkeypatch) -> None:
    monkeypatch.setattr(attention_module, "MATMUL_MAX_KEYS", max_keys)
    q, k, v = _qkv()
    mask = _key_mask([7, 0, 3], 7)  # the second sentence has no key at all
    for need_weights in (False, True):
        q.requires_grad_(True)
        out, weights = attention(q, k, v, mask, need_weights=need_weights)
        assert torch.isfinite(out).all()
        assert (out[1] == 0).all()
        out.sum().backward()
        assert q.grad is not None and torch.isfinite(q.grad).all()
        q.grad = None
        if weights is not None:
            assert (weights[1] == 0).all()


def test_the_matmul_path_takes_short_keys_in_training_and_small_problems_in_inference() -> None:
    q = torch.randn(2, 2, 3, 4)  # 3 queries
    assert attention_module.matmuls_are_faster(q, 64) and not attention_module.matmuls_are_faster(q, 65)
    with torch.no_grad():  # queries x keys <= 4096
        assert attention_module.matmuls_are_faster(q, 1365) and not attention_module.matmuls_are_faster(q, 1366)
    assert not attention_module.matmuls_are_faster(q.to("meta"), 10)  # not on a CPU


@pytest.mark.parametrize(
    ("queries", "keys", "padded", "is_causal", "kv_heads"),
    [(5, 7, True, False, 2), (6, 6, False, True, 2), (6, 6, True, True, 2), (5, 7, True, False, 1)],
    ids=["padding", "causal", "padding+causal", "gqa"],
)
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_matmul_path_equals_the_fused_kernel_in_value_and_gradient(
    queries: int, keys: int, padded: bool, is_causal: bool, kv_heads: int, dtype: torch.dtype, monkeypatch
) -> None:
    torch.manual_seed(0)
    q = torch.randn(3, 2, queries, 8)
    k, v = torch.randn(3, kv_heads, keys, 8), torch.randn(3, kv_heads, keys, 8)
    mask = _key_mask([keys, keys - 2, 3], keys) if padded else None
    grad = torch.randn(3, 2, queries, 8)

    def run(max_keys: int) -> list[torch.Tensor]:
        monkeypatch.setattr(attention_module, "MATMUL_MAX_KEYS", max_keys)
        leaves = [t.to(dtype).requires_grad_() for t in (q, k, v)]
        out, _ = attention(*leaves, mask, is_causal=is_causal)
        out.float().backward(grad)
        return [out.float(), *(t.grad.float() for t in leaves)]

    tolerance = 1e-5 if dtype == torch.float32 else 5e-2
    for matmuls, fused in zip(run(64), run(0), strict=True):
        assert torch.allclose(matmuls, fused, atol=tolerance, rtol=tolerance)


def test_multi_head_attention_shapes_and_parameters() -> None:
    self_attn = MultiHeadAttention(16, 4, self_attention=True)
    cross_attn = MultiHeadAttention(16, 4, self_attention=False)
    assert self_attn.qkv.weight.shape == (48, 16) and not hasattr(self_attn, "kv")
    assert cross_attn.q.weight.shape == (16, 16) and cross_attn.kv.weight.shape == (32, 16)
    x, memory = torch.randn(2, 5, 16), torch.randn(2, 9, 16)
    assert self_attn(x, is_causal=True).shape == (2, 5, 16)
    assert cross_attn(x, memory).shape == (2, 5, 16)
    assert cross_attn.attention_weights(x, memory).shape == (2, 4, 5, 9)
    with pytest.raises(ValueError):
        MultiHeadAttention(10, 4, self_attention=True)


def test_multi_head_attention_cache_grows_self_and_fills_cross_once() -> None:
    self_attn = MultiHeadAttention(16, 4, self_attention=True).eval()
    cross_attn = MultiHeadAttention(16, 4, self_attention=False).eval()
    x, memory = torch.randn(2, 4, 16), torch.randn(2, 9, 16)
    cache = DecoderCache(n_layers=1)
    enc = EncoderOut(memory, torch.zeros(2, 9, dtype=torch.bool))
    steps = []
    for t in range(4):
        (layer,) = cache.start_call(2, 1, enc, x.dtype)
        steps.append(self_attn(x[:, t : t + 1], is_causal=True, cache=layer))
    kv = cache.layers[0]
    assert kv.self_attn.length == 4 and kv.self_attn.view()[0].shape == (2, 4, 4, 4)
    assert torch.allclose(torch.cat(steps, dim=1), self_attn(x, is_causal=True), atol=1e-6)
    first = cross_attn(x[:, :1], memory, cache=layer)
    assert kv.cross_k is not None and kv.cross_k.shape == (2, 4, 9, 4)
    again = cross_attn(x[:, :1], None, cache=layer)  # memory is not read once the cache is filled
    assert torch.equal(first, again)


@pytest.mark.parametrize("group", [1, 4])
@pytest.mark.parametrize("masked", [False, True])
@torch.inference_mode()
def test_a_decoding_step_by_3d_matmuls_equals_attention_bit_for_bit(group: int, masked: bool) -> None:
    gen = torch.Generator().manual_seed(0)
    rows, heads, keys, head_dim = 6, 4, 9, 8
    buffer = torch.randn(rows, heads, 16, head_dim, generator=gen)  # a KV buffer of capacity 16: k, v are slices
    k, v = buffer[:, :, :keys], buffer.flip(3)[:, :, :keys]
    q = torch.randn(rows * group, 3 * heads * head_dim, generator=gen)[:, : heads * head_dim]  # strided rows
    q = q.view(rows * group, heads, 1, head_dim)
    mask = None
    if masked:  # additive, (rows, 1, 1, L): a ragged batch's or the source's padding
        blocked = torch.arange(keys) > torch.arange(rows)[:, None, None, None] + 2  # row r sees r + 3 keys
        mask = torch.zeros(rows, 1, 1, keys).masked_fill_(blocked, float("-inf"))
    cached = attention_module.CachedKeys(k, v, mask, group=group)
    fast = cached.attend_step(q)
    assert fast.shape == (rows * group, heads, 1, head_dim)
    assert torch.equal(fast, cached.attend(q))


@torch.inference_mode()
def test_the_3d_matmul_path_declines_what_it_cannot_do_alike() -> None:
    q, k = torch.randn(2, 4, 1, 8), torch.randn(2, 4, 5, 8)
    applies = attention_module.bmm_applies
    assert applies(q, k, None, is_causal=True)  # one query sees every key
    assert not applies(torch.randn(2, 4, 3, 8), k, None, is_causal=True)  # a causal mask to build
    assert not applies(q, k[:, :2], None, is_causal=False)  # grouped-query attention
    assert not applies(q, k, torch.ones(2, 1, 1, 5, dtype=torch.bool), is_causal=False)  # a bool mask
    assert not applies(q.double(), k.double(), None, is_causal=False)
    assert not applies(q, torch.randn(2, 4, attention_module.MATMUL_MAX_SCORES + 1, 8), None, is_causal=False)
    with torch.enable_grad():
        assert not applies(q, k, None, is_causal=False)
