"""R-Drop (mt.train.rdrop): the chunked loss against autograd on the logits, and the training step with it."""

import contextlib

import pytest
import torch
import torch.nn.functional as F
from test_train_step import VOCAB, make_batch, random_pairs

from mt.config import ModelConfig
from mt.data import PAD_ID
from mt.model import build_model
from mt.train.distributed import DistInfo
from mt.train.loss import label_smoothed_nll_loss, output_loss
from mt.train.rdrop import doubled, rdrop_output_loss
from mt.train.step import StepContext, train_step


def reference_rdrop(hidden, weight, target, epsilon, alpha):
    """The module docstring's formula by autograd on whole logits: (2B, T, D) hidden, (B, T) target."""
    batch = target.size(0)
    logits = F.linear(hidden, weight)  # (2B, T, V)
    ce1, nll1 = label_smoothed_nll_loss(logits[:batch], target, epsilon, ignore_index=0)
    ce2, nll2 = label_smoothed_nll_loss(logits[batch:], target, epsilon, ignore_index=0)
    lp1, lp2 = logits[:batch].log_softmax(-1), logits[batch:].log_softmax(-1)  # (B, T, V)
    kl12 = (lp1.exp() * (lp1 - lp2)).sum(-1)  # (B, T)
    kl21 = (lp2.exp() * (lp2 - lp1)).sum(-1)
    keep = target.ne(0)
    kl = (kl12 + kl21)[keep].sum()
    return 0.5 * (ce1 + ce2) + 0.25 * alpha * kl, 0.5 * (nll1 + nll2)


@pytest.mark.parametrize("chunk_bytes", [4 * 11 * 5, 2**20])  # 16-row chunks (the floor, not dividing 39 rows); all
@pytest.mark.parametrize("alpha", [0.0, 5.0])
def test_rdrop_loss_equals_autograd_on_the_logits(chunk_bytes, alpha):
    torch.manual_seed(0)
    hidden = torch.randn(6, 13, 8, requires_grad=True)  # two copies of 3 x 13
    weight = torch.randn(11, 8, requires_grad=True)
    target = torch.randint(1, 11, (3, 13))
    target[2, 6:] = 0  # padding
    loss, nll = rdrop_output_loss(hidden, weight, target, 0.1, alpha, ignore_index=0, chunk_bytes=chunk_bytes)
    (2.5 * loss).backward()  # an upstream scale reaches both gradients
    grads = hidden.grad.clone(), weight.grad.clone()
    hidden.grad = weight.grad = None
    ref_loss, ref_nll = reference_rdrop(hidden, weight, target, 0.1, alpha)  # its CE runs in float32
    (2.5 * ref_loss).backward()
    assert torch.allclose(loss, ref_loss, rtol=1e-5) and torch.allclose(nll, ref_nll, rtol=1e-5)
    assert torch.allclose(grads[0], hidden.grad, rtol=1e-5, atol=1e-4)
    assert torch.allclose(grads[1], weight.grad, rtol=1e-5, atol=1e-4)
    assert grads[0][2, 6:].abs().max() == 0 and grads[0][5, 6:].abs().max() == 0  # padding: no gradient
    assert not nll.requires_grad


def test_rdrop_kl_term_is_positive_when_the_copies_differ_and_zero_when_they_agree():
    torch.manual_seed(1)
    weight = torch.randn(11, 8)
    target = torch.randint(1, 11, (2, 5))
    same = torch.randn(2, 5, 8).repeat(2, 1, 1)  # (4, 5, 8): both copies equal
    plain, plain_nll = output_loss(same[:2], weight, target, 0.1, ignore_index=0)
    loss, nll = rdrop_output_loss(same, weight, target, 0.1, 5.0, ignore_index=0)
    assert torch.allclose(loss, plain, rtol=1e-6) and torch.allclose(nll, plain_nll, rtol=1e-6)
    different = same + 0.3 * torch.randn_like(same)
    with_kl, _ = rdrop_output_loss(different, weight, target, 0.1, 5.0, ignore_index=0)
    without, _ = rdrop_output_loss(different, weight, target, 0.1, 0.0, ignore_index=0)
    assert with_kl > without


def test_rdrop_loss_under_bf16_autocast_is_close_to_float32():
    torch.manual_seed(0)
    hidden = torch.randn(8, 20, 32, requires_grad=True)
    weight = (0.2 * torch.randn(50, 32)).requires_grad_()
    target = torch.randint(1, 50, (4, 20))
    with torch.autocast("cpu", dtype=torch.bfloat16):
        loss, _ = rdrop_output_loss(hidden, weight, target, 0.1, 5.0, ignore_index=0, chunk_bytes=4 * 50 * 16)
    loss.backward()
    assert loss.dtype == torch.float32 and hidden.grad.dtype == torch.float32 and weight.grad.dtype == torch.float32
    bf16 = loss.detach(), hidden.grad.clone(), weight.grad.clone()
    hidden.grad = weight.grad = None
    ref, _ = reference_rdrop(hidden, weight, target, 0.1, 5.0)
    ref.backward()
    assert torch.allclose(bf16[0], ref, rtol=1e-2)
    assert torch.allclose(bf16[1], hidden.grad, rtol=0.05, atol=0.05 * hidden.grad.abs().max().item())
    assert torch.allclose(bf16[2], weight.grad, rtol=0.05, atol=0.05 * weight.grad.abs().max().item())


def test_rdrop_loss_rejects_hidden_that_is_not_the_doubled_batch():
    with pytest.raises(ValueError, match="R-Drop expects hidden of 4 x 5 rows"):
        rdrop_output_loss(torch.randn(2, 5, 8), torch.randn(11, 8), torch.ones(2, 5, dtype=torch.long), 0.1, 1.0, 0)


def test_doubled_repeats_the_batch_after_itself():
    a = torch.tensor([[1, 2], [3, 4]])
    (twice,) = doubled(a)
    assert twice.tolist() == [[1, 2], [3, 4], [1, 2], [3, 4]]


def _step(dropout: float, alpha: float, seed: int = 0):
    """One SGD update of a seeded tiny model on a fixed batch; returns (result, parameters after)."""
    torch.manual_seed(seed)
    cfg = ModelConfig(encoder_layers=1, decoder_layers=1, d_model=32, d_ff=64, heads=4, dropout=dropout)
    model = build_model(cfg, VOCAB, VOCAB, PAD_ID)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.5)
    ctx = StepContext(
        model=model, output_weight=model.decoder.output_weight, optimizer=optimizer, dist=DistInfo(),
        device=torch.device("cpu"), label_smoothing=0.1, pad_id=PAD_ID, clip_norm=0.0,
        autocast=contextlib.nullcontext, rdrop_alpha=alpha,
    )
    result = train_step(ctx, [make_batch(random_pairs(5, seed=3))])
    return result, [p.detach().clone() for p in model.parameters()]


def test_rdrop_step_without_dropout_is_the_plain_step():
    """Without dropout both copies are the same function of the same batch: no KL, the same update."""
    plain, plain_params = _step(dropout=0.0, alpha=0.0)
    rdrop, rdrop_params = _step(dropout=0.0, alpha=5.0)
    assert rdrop.ntokens == plain.ntokens
    assert abs(rdrop.loss_sum - plain.loss_sum) < 1e-4 * plain.loss_sum
    assert abs(rdrop.nll_sum - plain.nll_sum) < 1e-4 * plain.nll_sum
    for a, b in zip(plain_params, rdrop_params, strict=True):
        assert torch.allclose(a, b, atol=1e-5)


def test_rdrop_step_with_dropout_adds_the_kl_between_the_two_copies():
    """With dropout the copies get different masks: the KL term makes the loss larger than the CE."""
    rdrop, _ = _step(dropout=0.3, alpha=5.0)
    kl_free, _ = _step(dropout=0.3, alpha=1e-9)  # R-Drop's path with the same masks, KL weight ~0
    assert rdrop.nll_sum == pytest.approx(kl_free.nll_sum, rel=1e-6)  # the same two copies
    assert rdrop.loss_sum > kl_free.loss_sum + 1e-3
