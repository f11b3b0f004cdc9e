"""mt.model.dropout: the CPU mask's keep rate, scaling, backward, determinism and edge cases."""

import pytest
import torch

from mt.model.dropout import MASK_LEVELS, Dropout, dropout, keep_threshold, random_keep_mask


@pytest.mark.parametrize("p", [0.1, 0.3, 0.5, 0.9])
def test_keep_rate_is_one_minus_p(p):
    torch.manual_seed(0)
    mask = random_keep_mask(torch.Size([1000, 1000]), p)
    assert mask.dtype == torch.bool and mask.shape == (1000, 1000)
    assert abs(keep_threshold(p) / MASK_LEVELS - (1 - p)) <= 2**-16
    assert abs(mask.float().mean().item() - (1 - p)) < 0.003  # 6 sigma of 1e6 draws


def test_mask_has_no_pattern_across_rows_or_columns():
    torch.manual_seed(0)
    mask = random_keep_mask(torch.Size([4000, 256]), 0.3).float()
    assert (mask.mean(0) - 0.7).abs().max() < 0.04  # every column (each 4 bytes of a 64-bit word too)
    assert (mask.mean(1) - 0.7).abs().max() < 0.15
    odd_lengths = random_keep_mask(torch.Size([3, 5, 7]), 0.3)  # numel not a multiple of 4
    assert odd_lengths.shape == (3, 5, 7)


def test_kept_values_are_scaled_by_one_over_keep_and_grad_uses_the_same_mask():
    torch.manual_seed(0)
    x = torch.randn(64, 33, requires_grad=True)
    y = dropout(x, 0.3, training=True)
    kept = y != 0
    scale = MASK_LEVELS / keep_threshold(0.3)
    assert torch.allclose(y[kept], x[kept] * scale)
    y.backward(torch.ones_like(y))
    assert torch.equal(x.grad, kept.float() * scale)


def test_expectation_is_the_input():
    torch.manual_seed(0)
    x = torch.full((2000, 500), 2.0)
    assert abs(dropout(x, 0.3, training=True).mean().item() - 2.0) < 0.01


def test_bf16_stays_bf16():
    y = dropout(torch.ones(8, 8, dtype=torch.bfloat16, requires_grad=True), 0.3, training=True)
    assert y.dtype == torch.bfloat16


def test_identity_in_eval_and_for_p_zero_and_zeros_for_p_one():
    x = torch.randn(10, 10)
    assert dropout(x, 0.3, training=False) is x
    assert dropout(x, 0.0, training=True) is x
    assert torch.equal(dropout(x, 1.0, training=True), torch.zeros_like(x))
    layer = Dropout(0.3).eval()
    assert layer(x) is x


def test_seeded_generator_makes_it_reproducible():
    x = torch.randn(100, 100)
    torch.manual_seed(5)
    a = dropout(x, 0.3, training=True)
    b = dropout(x, 0.3, training=True)
    torch.manual_seed(5)
    assert torch.equal(dropout(x, 0.3, training=True), a)
    assert not torch.equal(a, b)


@pytest.mark.parametrize("p", [-0.1, 1.5])
def test_rejects_probabilities_outside_0_1(p):
    with pytest.raises(ValueError, match="between 0 and 1"):
        Dropout(p)
