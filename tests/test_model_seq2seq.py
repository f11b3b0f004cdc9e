"""The encoder-decoder: shapes, causality, padding invariance, equivariance, the incremental cache."""

import pytest
import torch

from mt.config import ModelConfig
from mt.model import BeamCache, DecoderCache, EncoderLayer, EncoderOut, Seq2SeqTransformer, build_model
from mt.model.cache import append_rows

PAD, BOS, EOS, VOCAB = 0, 2, 3, 48


def tiny_model(**overrides: object) -> Seq2SeqTransformer:
    cfg = ModelConfig(encoder_layers=2, decoder_layers=2, d_model=32, d_ff=64, heads=4, dropout=0.1)
    for key, value in overrides.items():
        setattr(cfg, key, value)
    return build_model(cfg, VOCAB, VOCAB).eval()


def pad_batch(rows: list[list[int]]) -> tuple[torch.Tensor, torch.Tensor]:
    """Right-pad ``rows`` with PAD -> ids (B, L), pad_mask (B, L)."""
    width = max(len(r) for r in rows)
    ids = torch.tensor([r + [PAD] * (width - len(r)) for r in rows])
    return ids, ids.eq(PAD)


def random_batch(lengths: list[int], bos: bool = False) -> tuple[torch.Tensor, torch.Tensor]:
    rows = [torch.randint(4, VOCAB, (n,)).tolist() for n in lengths]
    return pad_batch([[BOS] + r if bos else r + [EOS] for r in rows])


def test_shapes_at_every_stage() -> None:
    model = tiny_model()
    src, src_mask = random_batch([6, 3, 8])  # S = 9
    tgt, _ = random_batch([4, 5, 2], bos=True)  # T = 6
    enc = model.encode(src, src_mask)
    assert enc.out.shape == (3, 9, 32) and enc.pad_mask is src_mask
    assert model.encoder.embedding(src).shape == (3, 9, 32)
    assert model.decoder.embedding(tgt).shape == (3, 6, 32)
    logits = model.decode(tgt, enc)
    assert logits.shape == (3, 6, VOCAB) and logits.dtype == torch.float32
    assert torch.equal(model(src, src_mask, tgt), logits)
    weights = model.cross_attention_weights(src, src_mask, tgt)
    assert weights.shape == (3, 6, 9)
    assert torch.allclose(weights.sum(-1), torch.ones(3, 6), atol=1e-5)
    assert (weights[src_mask[:, None, :].expand_as(weights)] == 0).all()
    assert model.cross_attention_weights(src, src_mask, tgt, layer=0).shape == (3, 6, 9)


def test_decoder_is_causal() -> None:
    model = tiny_model()
    src, src_mask = random_batch([5, 7])
    tgt, _ = random_batch([7, 7], bos=True)
    enc = model.encode(src, src_mask)
    t = 3
    changed = tgt.clone()
    changed[:, t + 1 :] = torch.randint(4, VOCAB, changed[:, t + 1 :].shape)
    before, after = model.decode(tgt, enc), model.decode(changed, enc)
    assert torch.allclose(before[:, : t + 1], after[:, : t + 1], atol=1e-6)
    assert not torch.allclose(before[:, t + 1 :], after[:, t + 1 :], atol=1e-3)


def test_padding_does_not_change_a_sentence() -> None:
    model = tiny_model()
    src, src_mask = random_batch([4, 9, 7])
    tgt, _ = random_batch([3, 8, 6], bos=True)
    alone_src, alone_mask = src[:1, :5], src_mask[:1, :5]  # 4 pieces + EOS, no padding
    alone_tgt = tgt[:1, :4]  # BOS + 3 pieces
    assert src_mask[0].sum() > 0 and not alone_mask.any()
    enc, enc_alone = model.encode(src, src_mask), model.encode(alone_src, alone_mask)
    assert torch.allclose(enc.out[:1, :5], enc_alone.out, atol=1e-5)
    assert torch.allclose(model.decode(tgt, enc)[:1, :4], model.decode(alone_tgt, enc_alone), atol=1e-5)


def test_encoder_layer_is_permutation_equivariant_without_positions() -> None:
    layer = EncoderLayer(d_model=32, heads=4, d_ff=64, dropout=0.1).eval()
    x = torch.randn(2, 7, 32)
    perm = torch.randperm(7)
    assert torch.allclose(layer(x[:, perm], None), layer(x, None)[:, perm], atol=1e-5)
    keep = torch.rand(2, 7) > 0.3
    keep[:, 0] = True
    mask = keep[:, None, None, :]
    assert torch.allclose(layer(x[:, perm], mask[..., perm]), layer(x, mask)[:, perm], atol=1e-5)


def decode_steps(
    model: Seq2SeqTransformer, tgt: torch.Tensor, enc: EncoderOut, cache: DecoderCache | BeamCache, steps: range
) -> torch.Tensor:
    return torch.cat([model.decode(tgt[:, t : t + 1], enc, cache) for t in steps], dim=1)


@pytest.mark.parametrize("pre_ln", [False, True], ids=["post-ln", "pre-ln"])
def test_incremental_decoding_equals_full_forward_also_after_reorder(pre_ln: bool) -> None:
    model = tiny_model(pre_ln=pre_ln)
    src, src_mask = random_batch([5, 9, 3, 7])
    tgt, _ = random_batch([8, 8, 8, 8], bos=True)  # T = 9
    enc = model.encode(src, src_mask)
    full = model.decode(tgt, enc)

    cache = model.new_cache()
    assert cache.length == 0
    incremental = decode_steps(model, tgt, enc, cache, range(3))
    assert cache.length == 3
    assert torch.allclose(incremental, full[:, :3], atol=1e-5)

    permutation = torch.tensor([2, 0, 3, 1])
    cache.reorder(permutation)
    enc.reorder(permutation)
    step = decode_steps(model, tgt[permutation], enc, cache, range(3, 5))
    assert torch.allclose(step, full[permutation, 3:5], atol=1e-5)

    keep = torch.tensor([3, 3, 0])  # drop two rows, repeat one (as beam search does)
    assert cache.reorder(keep) is cache
    enc = enc.reorder(keep)
    rows = permutation[keep]
    assert cache.src_pad_mask is not None and torch.equal(cache.src_pad_mask, src_mask[rows])
    step = decode_steps(model, tgt[rows], enc, cache, range(5, 9))
    assert cache.length == 9 and cache.layers[0].self_attn.view()[0].shape == (3, 4, 9, 8)
    assert torch.allclose(step, full[rows, 5:9], atol=1e-5)


def test_cached_decode_reads_only_the_pad_mask_after_the_first_call() -> None:
    model = tiny_model()
    src, src_mask = random_batch([5, 2])
    tgt, _ = random_batch([4, 4], bos=True)
    enc = model.encode(src, src_mask)
    full = model.decode(tgt, enc)
    cache = model.new_cache()
    first = model.decode(tgt[:, :2], enc, cache)  # a chunk of two tokens through the cache
    garbage = EncoderOut(out=torch.full_like(enc.out, float("nan")), pad_mask=torch.ones_like(src_mask))
    rest = model.decode(tgt[:, 2:], garbage, cache)
    assert torch.allclose(torch.cat([first, rest], dim=1), full, atol=1e-5)


@pytest.mark.parametrize(
    "overrides",
    [
        dict(pre_ln=True),
        dict(activation="gelu", attention_dropout=0.1, activation_dropout=0.1),
        dict(positions="learned", max_positions=32),
        dict(share_all_embeddings=False),
    ],
    ids=["pre-ln", "gelu+dropouts", "learned-positions", "two-way-tying"],
)
def test_options_train_and_decode(overrides: dict[str, object]) -> None:
    model = tiny_model(**overrides).train()
    src, src_mask = random_batch([5, 3])
    tgt, _ = random_batch([4, 6], bos=True)
    logits = model(src, src_mask, tgt)
    logits.logsumexp(-1).mean().backward()
    assert all(p.grad is not None for p in model.parameters())
    assert (model.encoder.final_norm is not None) == bool(overrides.get("pre_ln", False))
    model.eval()
    enc, cache = model.encode(src, src_mask), model.new_cache()
    with torch.no_grad():
        steps = torch.cat([model.decode(tgt[:, t : t + 1], enc, cache) for t in range(tgt.size(1))], 1)
        assert torch.allclose(steps, model.decode(tgt, enc), atol=1e-5)


def test_unknown_activation_is_rejected() -> None:
    with pytest.raises(ValueError, match="activation"):
        tiny_model(activation="swish")


def test_bf16_model_gives_bf16_logits() -> None:
    model = tiny_model().to(torch.bfloat16)
    src, src_mask = random_batch([5, 3])
    tgt, _ = random_batch([4, 6], bos=True)
    enc, cache = model.encode(src, src_mask), model.new_cache()
    assert model.decode(tgt[:, :1], enc, cache).dtype == torch.bfloat16
    full = model.decode(tgt, enc)
    assert full.dtype == torch.bfloat16 and torch.isfinite(full).all()


def test_plain_cache_follows_any_reorder_also_mixing_sentences() -> None:
    """Rows of the plain cache are independent: beams swapping, sentences leaving, rows of different
    sentences mixed (which a BeamCache refuses) all decode as without a cache."""
    model = tiny_model()
    src, src_mask = random_batch([5, 9, 4])
    tgt, _ = random_batch([6, 6, 6], bos=True)  # T = 8
    beams = 3
    enc = model.encode(src, src_mask).reorder(torch.arange(3).repeat_interleave(beams))  # rows 0 0 0 1 1 1 2 2 2
    tgt = tgt.repeat_interleave(beams, dim=0)  # (9, T)
    full = model.decode(tgt, enc)  # (9, T, V)
    cache = model.new_cache()
    decode_steps(model, tgt, enc, cache, range(2))
    assert cache.layers[0].cross_k is not None and cache.layers[0].cross_k.size(0) == 9  # one per row

    rows = torch.arange(9)
    for index in ([2, 2, 0, 4, 3, 3, 8, 6, 7], [1, 1, 0, 8, 6, 7], [5, 0]):  # within, drop a sentence, mix
        index = torch.tensor(index)
        cache.reorder(index)
        enc.reorder(index)
        rows = rows[index]
        start = cache.length
        step = decode_steps(model, tgt[rows], enc, cache, range(start, start + 2))
        assert torch.allclose(step, full[rows, start : start + 2], atol=1e-5)
    assert cache.layers[0].cross_k.size(0) == 2
    kept = int((~src_mask[[2, 0]]).sum(dim=1).max())  # the longest source left: the steps only it read go
    assert kept < src_mask.size(1) and cache.layers[0].cross_k.size(2) == kept
    assert torch.equal(cache.src_pad_mask, src_mask[rows // beams, :kept])
    assert torch.equal(cache.src_pad_mask, src_mask[[2, 0], :kept])


def test_appended_rows_go_into_spare_rows_and_widen_the_source_steps() -> None:
    """Joining sentences (continuous batching) write only their own rows while the allocation has room;
    the rows held stay in place, and what a row holds past its own steps is finite (it is masked)."""
    held, joining = torch.randn(3, 2, 4, 5), torch.randn(2, 2, 6, 5)  # (rows, H, S, Dh)
    grown, allocation = append_rows(held, joining, None)
    assert grown.shape == (5, 2, 6, 5) and allocation.size(0) == 10  # room for as many rows again
    assert torch.equal(grown[:3, :, :4], held) and torch.equal(grown[3:], joining)
    assert torch.equal(grown[:3, :, 4:], torch.zeros(3, 2, 2, 5))

    left = grown[:4, :, :3]  # a row left and the source narrowed: a view of the allocation's start
    before = left.clone()
    again, same = append_rows(left, torch.randn(3, 2, 2, 5), allocation)
    assert same is allocation and again.data_ptr() == allocation.data_ptr() and again.shape == (7, 2, 3, 5)
    assert torch.equal(again[:4], before) and bool(again.isfinite().all())

    full, bigger = append_rows(again, 4, allocation, valid_steps=2)  # no room: a new allocation, 2 steps kept
    assert bigger is not allocation and full.shape == (11, 2, 3, 5) and bigger.size(0) == 22
    assert torch.equal(full[:7, :, :2], again[:, :, :2]) and torch.equal(full[7:], torch.zeros(4, 2, 3, 5))


def test_plain_cache_rejects_rows_that_disagree_and_indices_out_of_range() -> None:
    model = tiny_model()
    src, src_mask = random_batch([5, 9, 4])
    tgt, _ = random_batch([6, 6, 6], bos=True)
    enc, cache = model.encode(src, src_mask), model.new_cache()
    model.decode(tgt[:, :1], enc, cache)
    with pytest.raises(ValueError, match="out of range"):
        cache.reorder(torch.tensor([0, 3]))
    with pytest.raises(ValueError, match="out of range"):
        cache.reorder(torch.tensor([-1, 0]))
    with pytest.raises(ValueError, match="1-D integer"):
        cache.reorder(torch.tensor([0.0, 1.0]))
    with pytest.raises(ValueError, match="out of range"):
        enc.reorder(torch.tensor([3]))
    cache.reorder(torch.tensor([2, 0]))  # the encoder output was not reordered with it
    with pytest.raises(ValueError, match="reorder the cache and the encoder output"):
        model.decode(tgt[[2, 0], 1:2], enc, cache)
    enc.reorder(torch.tensor([2, 0]))
    assert model.decode(tgt[[2, 0], 1:2], enc, cache).shape == (2, 1, VOCAB)
