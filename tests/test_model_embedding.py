"""Embeddings: the fairseq sinusoid layout, scaling, learned positions, weight tying and initialisation."""

import math

import pytest
import torch

from mt.config import ModelConfig
from mt.model import LearnedPositions, SinusoidalPositions, build_model, sinusoid_table

TINY = dict(encoder_layers=1, decoder_layers=1, d_model=32, d_ff=64, heads=4, dropout=0.0)


def fairseq_get_embedding(num_embeddings: int, embedding_dim: int) -> torch.Tensor:
    """fairseq's ``SinusoidalPositionalEmbedding.get_embedding`` (without its padding row), written out."""
    half_dim = embedding_dim // 2
    emb = math.log(10000) / (half_dim - 1)
    emb = torch.exp(torch.arange(half_dim, dtype=torch.float) * -emb)
    emb = torch.arange(num_embeddings, dtype=torch.float).unsqueeze(1) * emb.unsqueeze(0)
    emb = torch.cat([torch.sin(emb), torch.cos(emb)], dim=1).view(num_embeddings, -1)
    if embedding_dim % 2 == 1:
        emb = torch.cat([emb, torch.zeros(num_embeddings, 1)], dim=1)
    return emb


@pytest.mark.parametrize("d_model", [8, 64, 7])
def test_sinusoids_match_fairseq_formula_with_sin_cos_halves(d_model: int) -> None:
    table = sinusoid_table(torch.arange(50), d_model)
    assert torch.allclose(table, fairseq_get_embedding(50, d_model), atol=1e-6)
    half = d_model // 2
    assert torch.equal(table[0, :half], torch.zeros(half))  # sin(0): position 0 is the first token
    assert torch.equal(table[0, half : 2 * half], torch.ones(half))  # cos(0)


def test_sinusoidal_positions_continue_past_the_table() -> None:
    positions = SinusoidalPositions(16, max_positions=10)
    assert positions(3, 4).shape == (4, 16)
    assert torch.allclose(positions(8, 5), sinusoid_table(torch.arange(8, 13), 16), atol=1e-6)
    assert len(list(positions.parameters())) == 0 and "table" not in positions.state_dict()


def test_learned_positions_reject_positions_past_max() -> None:
    positions = LearnedPositions(16, max_positions=10)
    assert positions(6, 4).shape == (4, 16)
    with pytest.raises(ValueError):
        positions(6, 5)


def test_embedding_is_scaled_token_plus_position() -> None:
    model = build_model(ModelConfig(**TINY), 40, 40)
    embedding = model.encoder.embedding
    tokens = torch.tensor([[5, 6, 7]])
    expected = embedding.token.weight[tokens] * math.sqrt(32) + sinusoid_table(torch.arange(3), 32)
    assert torch.allclose(embedding(tokens), expected, atol=1e-6)
    shifted = embedding.token.weight[tokens] * math.sqrt(32) + sinusoid_table(torch.arange(4, 7), 32)
    assert torch.allclose(embedding(tokens, start=4), shifted, atol=1e-6)


def test_three_way_tying_shares_one_parameter() -> None:
    model = build_model(ModelConfig(**TINY, share_all_embeddings=True), 40, 40)
    enc, dec = model.encoder.embedding.token.weight, model.decoder.embedding.token.weight
    assert enc is dec and model.decoder.output_weight is dec
    assert sum(p.numel() for p in model.parameters() if p.dim() == 2 and p.size(0) == 40) == 40 * 32


def test_two_way_tying_with_separate_vocabularies() -> None:
    model = build_model(ModelConfig(**TINY, share_all_embeddings=False), 48, 40)
    enc, dec = model.encoder.embedding.token.weight, model.decoder.embedding.token.weight
    assert enc is not dec and enc.shape == (48, 32) and dec.shape == (40, 32)
    assert model.decoder.output_weight is dec
    logits = model(torch.tensor([[47, 3]]), torch.tensor([[False, False]]), torch.tensor([[2, 39]]))
    assert logits.shape == (1, 2, 40)


def test_sharing_all_embeddings_needs_equal_vocabularies() -> None:
    with pytest.raises(ValueError, match="joint vocabulary"):
        build_model(ModelConfig(**TINY, share_all_embeddings=True), 48, 40)


def test_initialisation() -> None:
    d = 256
    model = build_model(ModelConfig(**{**TINY, "d_model": d, "d_ff": 512}), 1000, 1000, pad_id=0)
    weight = model.decoder.embedding.token.weight
    assert torch.equal(weight[0], torch.zeros(d))
    assert weight[1:].std().item() == pytest.approx(d**-0.5, rel=0.02)
    assert weight[1:].mean().abs().item() < 0.01
    layer = model.encoder.layers[0]
    # fairseq: Xavier-uniform with gain 1/sqrt(2) for each (d, d) block of Q|K|V (= Xavier of the fused
    # (3d, d) matrix of the original in_proj), gain 1 for the output projection
    bound = math.sqrt(6 / (d + d))
    for weight, gain in [
        (layer.self_attn.qkv.weight, 2**-0.5),
        (model.decoder.layers[0].cross_attn.q.weight, 2**-0.5),
        (model.decoder.layers[0].cross_attn.kv.weight, 2**-0.5),
        (layer.self_attn.out.weight, 1.0),
    ]:
        assert weight.abs().max().item() <= gain * bound and weight.abs().max().item() > 0.95 * gain * bound
        assert weight.std().item() == pytest.approx(gain * bound / math.sqrt(3), rel=0.03)
    for name, param in model.named_parameters():
        if name.endswith(".bias") and "norm" not in name:
            assert torch.equal(param, torch.zeros_like(param)), name


def test_pad_row_follows_pad_id() -> None:
    model = build_model(ModelConfig(**TINY), 40, 40, pad_id=5)
    assert torch.equal(model.encoder.embedding.token.weight[5], torch.zeros(32))
    assert model.encoder.embedding.token.padding_idx == 5
