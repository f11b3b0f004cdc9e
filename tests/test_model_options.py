"""The modern options next to the paper's Transformer: rmsnorm, swiglu, rope, grouped-query attention,
qk-norm. Each alone and all together: cache == no cache (also after plain and beam reorders), causality,
shapes, parameter counts = the closed form, KV-cache size; the math of each part; old configs load."""

from typing import Any

import pytest
import torch
import torch.nn.functional as F

from mt.config import ModelConfig, compose, to_config, to_dict, validate_group
from mt.errors import UserError
from mt.model import BeamCache, RotaryEmbedding, Seq2SeqTransformer, attention, build_model, grouped_attention
from mt.model.layers import swiglu_hidden_size
from mt.model.summary import closed_form_for, count_parameters, kv_cache_values_per_token, summary

ALL = dict(pre_ln=True, norm="rmsnorm", activation="swiglu", positions="rope", kv_heads=2, qk_norm=True)
OPTIONS: dict[str, dict[str, Any]] = {
    "rmsnorm_post_ln": dict(norm="rmsnorm"),
    "rmsnorm_pre_ln": dict(norm="rmsnorm", pre_ln=True),
    "swiglu": dict(activation="swiglu"),
    "swiglu_hidden": dict(activation="swiglu", swiglu_hidden=24),
    "rope": dict(positions="rope"),
    "rope_pre_ln": dict(positions="rope", pre_ln=True),
    "mqa": dict(kv_heads=1),
    "gqa": dict(kv_heads=2),
    "qk_norm": dict(qk_norm=True),
    "all": ALL,
    "all_mqa": {**ALL, "kv_heads": 1},
}
V = 40


def tiny(options: dict[str, Any], seed: int = 0) -> Seq2SeqTransformer:
    torch.manual_seed(seed)
    cfg = ModelConfig(encoder_layers=2, decoder_layers=2, d_model=32, d_ff=64, heads=4, dropout=0.0,
                      max_positions=16, **options)  # fmt: skip
    return build_model(cfg, V, V).eval()


def batch(rows: int = 4, src_len: int = 7, tgt_len: int = 6, seed: int = 1) -> tuple[torch.Tensor, ...]:
    g = torch.Generator().manual_seed(seed)
    src = torch.randint(4, V, (rows, src_len), generator=g)
    pad = torch.zeros(rows, src_len, dtype=torch.bool)
    pad[0, -3:] = True
    pad[-1, -1:] = True
    return src.masked_fill(pad, 0), pad, torch.randint(4, V, (rows, tgt_len), generator=g)


ids = list(OPTIONS)
params = [OPTIONS[k] for k in ids]


@pytest.mark.parametrize("options", params, ids=ids)
@torch.no_grad()
def test_cache_equals_no_cache(options: dict[str, Any]) -> None:
    model = tiny(options)
    src, pad, tgt = batch()
    full = model(src, pad, tgt)  # (B, T, V)
    assert full.shape == (4, 6, V)
    enc, cache = model.encode(src, pad), model.new_cache()
    cached = [model.decode(tgt[:, :2], enc, cache)]  # two tokens at once, then one at a time
    cached += [model.decode(tgt[:, t : t + 1], enc, cache) for t in range(2, tgt.size(1))]
    torch.testing.assert_close(torch.cat(cached, dim=1), full, rtol=1e-5, atol=1e-5)
    kv_heads = options.get("kv_heads") or 4
    keys, cross_k = cache.layers[0].self_attn.keys, cache.layers[0].cross_k
    assert keys is not None and keys.shape[1] == kv_heads and keys.shape[4] == 8  # (rows, Hkv, capacity, slots, Dh)
    assert cross_k is not None and cross_k.shape == (4, kv_heads, 7, 8)  # (rows, Hkv, S, Dh)


@pytest.mark.parametrize("options", params, ids=ids)
@torch.no_grad()
def test_cache_after_a_plain_reorder(options: dict[str, Any]) -> None:
    model = tiny(options)
    src, pad, tgt = batch()
    enc, cache = model.encode(src, pad), model.new_cache()
    model.decode(tgt[:, :3], enc, cache)
    index = torch.tensor([2, 0, 0, 3, 1])
    cache.reorder(index)
    enc.reorder(index)
    history = tgt[index, :3]
    new = torch.randint(4, V, (5, 2), generator=torch.Generator().manual_seed(5))
    out = torch.cat([model.decode(new[:, t : t + 1], enc, cache) for t in range(2)], dim=1)
    full = model(src[index], pad[index], torch.cat([history, new], dim=1))[:, 3:]
    torch.testing.assert_close(out, full, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("options", params, ids=ids)
@torch.no_grad()
def test_cache_after_beam_reorders(options: dict[str, Any]) -> None:
    """A BeamCache of 2 sentences x 3 beams: fan out, beams swap and repeat, then a sentence leaves."""
    model = tiny(options)
    src, pad, _ = batch(rows=2)
    k = 3
    enc, cache = model.encode(src, pad), model.new_cache(beams_per_sentence=k)
    assert isinstance(cache, BeamCache)
    g = torch.Generator().manual_seed(7)
    history = torch.full((2, 1), 2)  # BOS, one row per sentence
    sentence = torch.arange(2)  # the sentence of each row
    last = model.decode(history, enc, cache)
    for index in ([0, 0, 0, 1, 1, 1], [2, 0, 0, 4, 4, 3], [1, 2, 1, 5, 3, 3], [3, 4, 5]):
        index_t = torch.tensor(index)
        cache.reorder(index_t)
        history, sentence = history[index_t], sentence[index_t]
        if len(index) == 3:  # sentence 0 left the batch
            enc.reorder(torch.tensor([1]))
        step = torch.randint(4, V, (len(index), 1), generator=g)
        last = model.decode(step, enc, cache)
        history = torch.cat([history, step], dim=1)
        full = model(src[sentence], pad[sentence], history)[:, -1:]
        torch.testing.assert_close(last, full, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("options", params, ids=ids)
@torch.no_grad()
def test_a_future_target_token_does_not_change_earlier_outputs(options: dict[str, Any]) -> None:
    model = tiny(options)
    src, pad, tgt = batch()
    changed = tgt.clone()
    changed[:, 4] = (changed[:, 4] + 1 - 4) % (V - 4) + 4
    a, b = model(src, pad, tgt), model(src, pad, changed)
    torch.testing.assert_close(a[:, :4], b[:, :4], rtol=0, atol=0)
    assert not torch.allclose(a[:, 4:], b[:, 4:])


@pytest.mark.parametrize("options", [*params, {"positions": "learned"}, {"tie_output": False}, {}],
                         ids=[*ids, "learned", "untied_output", "paper"])
@pytest.mark.parametrize("shared", [True, False])
def test_parameter_count_equals_the_closed_form(options: dict[str, Any], shared: bool) -> None:
    cfg = ModelConfig(encoder_layers=2, decoder_layers=3, d_model=32, d_ff=64, heads=4, max_positions=16,
                      share_all_embeddings=shared, **options)  # fmt: skip
    model = build_model(cfg, V, V)
    counts = count_parameters(model)
    assert counts == closed_form_for(cfg, V)
    assert counts["total"] == sum(p.numel() for p in model.parameters())


def test_an_untied_output_projection_is_a_matrix_of_its_own_that_trains() -> None:
    """``tie_output=false``: the logits come from ``decoder.output_projection`` (V, D), not the embedding;
    both get gradients, and the summary says the output is untied."""
    cfg = ModelConfig(encoder_layers=1, decoder_layers=1, d_model=32, d_ff=64, heads=4, tie_output=False)
    model = build_model(cfg, V, V)
    projection = model.decoder.output_projection
    assert projection is not None and projection.shape == (V, 32)
    assert model.decoder.output_weight is projection and projection is not model.decoder.embedding.token.weight
    src = torch.randint(4, V, (2, 5))
    hidden = torch.randn(2, 3, 32)
    torch.testing.assert_close(model.decoder.project(hidden), hidden @ projection.T)
    model(src, src == 0, src[:, :3]).sum().backward()
    assert projection.grad is not None and model.decoder.embedding.token.weight.grad is not None
    assert "output untied" in summary(cfg, V)


def test_swiglu_hidden_size_matches_the_relu_ffn_weights() -> None:
    assert swiglu_hidden_size(256) == 168 and swiglu_hidden_size(2048) == 1368 and swiglu_hidden_size(64) == 40
    assert swiglu_hidden_size(256, 100) == 100
    for d_ff in range(16, 4096, 8):  # the nearest multiple of 8: 3 h within 3 x 4 of 2 d_ff
        hidden = swiglu_hidden_size(d_ff)
        assert hidden % 8 == 0 and abs(3 * hidden - 2 * d_ff) <= 12


def test_swiglu_is_the_gated_formula() -> None:
    ffn = tiny({"activation": "swiglu"}).encoder.layers[0].ffn
    x = torch.randn(2, 3, 32)
    expected = ffn.fc2(F.silu(ffn.fc1(x)) * ffn.gate(x))
    torch.testing.assert_close(ffn(x), expected)
    assert ffn.fc1.out_features == 40


def test_rmsnorm_everywhere_and_final_norms() -> None:
    model = tiny({"norm": "rmsnorm", "pre_ln": True})
    norms = [m for m in model.modules() if isinstance(m, (torch.nn.LayerNorm, torch.nn.RMSNorm))]
    assert norms and all(isinstance(m, torch.nn.RMSNorm) and m.eps == 1e-5 for m in norms)
    assert len(norms) == 2 * 2 + 2 * 3 + 2  # sublayers + the two final norms
    x = torch.randn(3, 32)
    torch.testing.assert_close(norms[0](x), x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + 1e-5))


def test_rope_scores_depend_on_relative_positions_only() -> None:
    rope = RotaryEmbedding(8, max_positions=4)  # positions past the table are computed on the fly
    q, k = torch.randn(1, 1, 1, 8), torch.randn(1, 1, 1, 8)

    def score(p: int, s: int) -> torch.Tensor:
        return (rope(q, p) * rope(k, s)).sum()

    torch.testing.assert_close(score(3, 1), score(9, 7))
    torch.testing.assert_close(score(0, 0), (q * k).sum())
    assert not torch.allclose(score(3, 1), score(1, 3))
    torch.testing.assert_close(rope(q, 2).norm(), q.norm())  # a rotation
    x = torch.randn(1, 2, 6, 8)
    torch.testing.assert_close(rope(x, 0)[:, :, 3:], rope(x[:, :, 3:], 3))  # table and on-the-fly agree


def test_rope_adds_no_absolute_positions_and_needs_an_even_head_dim() -> None:
    model = tiny({"positions": "rope"})
    assert model.encoder.embedding.positions is None and model.decoder.embedding.positions is None
    assert model.decoder.layers[0].cross_attn.rope is None and model.decoder.layers[0].self_attn.rope is not None
    with pytest.raises(ValueError, match="even head dimension"):
        RotaryEmbedding(7, 8)
    with pytest.raises(UserError, match="model.positions=rope: needs an even head dimension"):
        validate_group("model", ModelConfig(d_model=12, heads=4, positions="rope"))


def test_rope_decodes_past_max_positions_with_the_cache() -> None:
    model = tiny({"positions": "rope"})  # max_positions=16
    src, pad, _ = batch(rows=2)
    tgt = torch.randint(4, V, (2, 20), generator=torch.Generator().manual_seed(3))
    with torch.no_grad():
        full = model(src, pad, tgt)
        enc, cache = model.encode(src, pad), model.new_cache()
        cached = torch.cat([model.decode(tgt[:, t : t + 1], enc, cache) for t in range(20)], dim=1)
    torch.testing.assert_close(cached, full, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("kv_heads", [1, 2])
def test_grouped_query_attention_equals_repeated_heads(dtype: torch.dtype, kv_heads: int) -> None:
    g = torch.Generator().manual_seed(0)
    q = torch.randn(2, 4, 5, 8, generator=g).to(dtype)
    k, v = (torch.randn(2, kv_heads, 7, 8, generator=g).to(dtype) for _ in range(2))
    mask = torch.ones(2, 1, 1, 7, dtype=torch.bool)
    mask[0, ..., -2:] = False
    k4, v4 = k.repeat_interleave(4 // kv_heads, 1), v.repeat_interleave(4 // kv_heads, 1)
    tol = dict(rtol=1e-5, atol=1e-5) if dtype == torch.float32 else dict(rtol=1e-2, atol=1e-2)
    for kwargs in (dict(mask=mask), dict(is_causal=True), dict(mask=mask, need_weights=True)):
        out, _ = attention(q, k, v, **kwargs)  # type: ignore[arg-type]
        ref, _ = attention(q, k4, v4, **kwargs)  # type: ignore[arg-type]
        torch.testing.assert_close(out, ref, **tol)
    qg = torch.randn(6, 4, 2, 8, generator=g).to(dtype)  # 2 groups x 3 rows
    kg, vg = k[:, :, :4], v[:, :, :4]
    torch.testing.assert_close(
        grouped_attention(qg, kg, vg, None, group=3),
        grouped_attention(qg, kg.repeat_interleave(4 // kv_heads, 1), vg.repeat_interleave(4 // kv_heads, 1), None, 3),
        **tol,
    )


def test_kv_cache_per_token_shrinks_with_kv_heads() -> None:
    assert kv_cache_values_per_token(4, 128) == kv_cache_values_per_token(4, 128, 4, 4) == 1024
    assert kv_cache_values_per_token(4, 128, 4, 2) == 512 and kv_cache_values_per_token(4, 128, 4, 1) == 256
    text = summary(ModelConfig(encoder_layers=4, decoder_layers=4, d_model=128, d_ff=256, heads=4, kv_heads=1), 100)
    assert "4 layers x 2 x 32 = 256 values" in text and "1 K/V heads" in text


def test_qk_norm_normalises_each_head() -> None:
    attn = tiny({"qk_norm": True}).decoder.layers[0].cross_attn
    assert attn.q_norm is not None and attn.k_norm is not None and attn.q_norm.weight.shape == (8,)
    with torch.no_grad():
        attn.q_norm.weight.fill_(2.0)
    q = attn._queries(torch.randn(2, 3, 32))  # (B, H, T, Dh)
    torch.testing.assert_close(q.pow(2).mean(-1), torch.full((2, 4, 3), 4.0), rtol=1e-3, atol=1e-3)


@pytest.mark.parametrize(
    ("override", "message"),
    [
        ("kv_heads=3", "model.kv_heads=3: must divide model.heads=4"),
        ("kv_heads=-1", "model.kv_heads=-1: must be >= 0"),
        ("norm=batchnorm", "model.norm=batchnorm: must be one of layernorm | rmsnorm"),
        ("positions=alibi", "model.positions=alibi: must be one of sinusoidal | learned | rope"),
        ("activation=swish", "model.activation=swish: must be one of relu | gelu | silu | swiglu"),
        ("sinusoid=paper", "model.sinusoid=paper: must be one of fairseq | marian"),
        ("swiglu_hidden=-8", "model.swiglu_hidden=-8: must be >= 0"),
    ],
)
def test_config_rules(override: str, message: str) -> None:
    key, value = override.split("=")
    cfg = ModelConfig(heads=4)
    setattr(cfg, key, type(getattr(cfg, key))(value))
    with pytest.raises(UserError, match=message.replace("|", r"\|")):
        validate_group("model", cfg)


@pytest.mark.parametrize(("stored", "positions"), [(True, "learned"), (False, "sinusoidal")])
def test_old_configs_with_learned_positions_load(stored: bool, positions: str) -> None:
    old = to_dict(compose())
    old["model"].pop("positions")
    old["model"]["learned_positions"] = stored
    assert to_config(old).model.positions == positions
    assert "learned_positions" in old["model"]  # the stored dict is not changed


def test_a_tiny_model_with_every_option_learns_to_copy() -> None:
    """At least 95% of 200 sequences copied exactly (the paper's model gets all: tests/test_model_learning.py).

    Not all, at this budget: with RoPE nothing tells the encoder-decoder attention a source token's
    position, so the decoder must find the i-th source token through relative cues the encoder learns.
    """
    from tests.test_model_learning import PAD, VOCAB, greedy, make_batch

    torch.manual_seed(0)
    options = {**ALL, "kv_heads": 1}
    cfg = ModelConfig(encoder_layers=2, decoder_layers=2, d_model=64, d_ff=128, heads=4, dropout=0.0, **options)
    model = build_model(cfg, VOCAB, VOCAB)
    optimizer = torch.optim.Adam(model.parameters(), lr=3e-3, betas=(0.9, 0.98))
    generator, steps = torch.Generator().manual_seed(0), 300
    schedule = torch.optim.lr_scheduler.LambdaLR(optimizer, lambda step: min(1.0, (step + 1) / 50) * (1 - step / steps))
    for _ in range(steps):
        src, src_mask, tgt_in, tgt_out = make_batch("copy", 32, generator)
        loss = F.cross_entropy(model(src, src_mask, tgt_in).flatten(0, 1), tgt_out.flatten(), ignore_index=PAD)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        schedule.step()
    model.eval()
    src, src_mask, _, tgt_out = make_batch("copy", 200, torch.Generator().manual_seed(1))
    hyps = greedy(model, src, src_mask, max_len=tgt_out.size(1))
    exact = sum(h[: (t != PAD).sum()].tolist() == t[t != PAD].tolist() for h, t in zip(hyps, tgt_out, strict=True))
    assert exact >= 190, f"{exact}/200 exact, last loss {loss.item():.4f}"


def test_modern_options_lists_what_exporters_must_refuse() -> None:
    from mt.model import modern_options

    assert modern_options(ModelConfig()) == []
    assert modern_options(ModelConfig(pre_ln=True, activation="gelu", positions="learned", kv_heads=4)) == []
    assert modern_options(ModelConfig(heads=4, **{**ALL, "kv_heads": 1})) == [
        "model.norm=rmsnorm",
        "model.activation=swiglu",
        "model.positions=rope",
        "model.kv_heads=1",
        "model.qk_norm=true",
    ]


@pytest.mark.parametrize("options", [ALL, {**ALL, "kv_heads": 1}], ids=["all", "all_mqa"])
def test_cross_attention_weights_and_bf16_autocast(options: dict[str, Any]) -> None:
    model = tiny(options)
    src, pad, tgt = batch()
    weights = model.cross_attention_weights(src, pad, tgt)  # (B, T, S), reference path with repeated K/V heads
    assert weights.shape == (4, 6, 7) and torch.allclose(weights.sum(-1), torch.ones(4, 6))
    assert bool((weights[0, :, -3:] == 0).all())  # padding gets no weight
    model.train()
    with torch.autocast("cpu", dtype=torch.bfloat16):
        logits = model(src, pad, tgt)
    logits.float().sum().backward()
    assert all(p.grad is not None for p in model.parameters())
    model.eval()
    with torch.no_grad(), torch.autocast("cpu", dtype=torch.bfloat16):
        full = model(src, pad, tgt)
        enc, cache = model.encode(src, pad), model.new_cache()
        cached = torch.cat([model.decode(tgt[:, t : t + 1], enc, cache) for t in range(tgt.size(1))], dim=1)
    torch.testing.assert_close(cached.float(), full.float(), rtol=0.05, atol=0.05)
