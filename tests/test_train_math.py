"""Loss and schedule: the formulas the paper and fairseq use, checked by hand."""

import math

import pytest
import torch
import torch.nn.functional as F

from mt.config import OptimConfig, TrainConfig
from mt.train.loss import label_smoothed_nll_loss
from mt.train.schedule import budget_factor, budget_progress, inverse_sqrt_lr, learning_rate, noam_lr


def test_no_smoothing_is_cross_entropy_sum_over_non_pad():
    logits = torch.randn(2, 5, 11)
    target = torch.randint(1, 11, (2, 5))
    target[1, 3:] = 0  # padding
    loss, nll = label_smoothed_nll_loss(logits, target, 0.0, ignore_index=0)
    ref = F.cross_entropy(logits.view(-1, 11), target.view(-1), ignore_index=0, reduction="sum")
    assert torch.allclose(loss, ref, atol=1e-5) and torch.allclose(nll, ref, atol=1e-5)


def test_smoothing_matches_eps_over_v_minus_1_distribution():
    torch.manual_seed(1)
    V, eps = 7, 0.1
    logits = torch.randn(1, 3, V)
    target = torch.tensor([[2, 5, 0]])  # last position is pad
    loss, nll = label_smoothed_nll_loss(logits, target, eps, ignore_index=0)
    lp = F.log_softmax(logits, -1)[0]
    expected = 0.0
    for t, y in enumerate([2, 5]):
        q = torch.full((V,), eps / (V - 1))
        q[y] = 1 - eps
        expected += float(-(q * lp[t]).sum())
    assert loss.item() == pytest.approx(expected, abs=1e-5)
    assert nll.item() == pytest.approx(float(-lp[0, 2] - lp[1, 5]), abs=1e-5)


def test_pad_positions_get_no_gradient():
    logits = torch.randn(1, 4, 9, requires_grad=True)
    target = torch.tensor([[3, 4, 0, 0]])
    loss, _ = label_smoothed_nll_loss(logits, target, 0.1, ignore_index=0)
    loss.backward()
    assert logits.grad[0, 2:].abs().sum() == 0 and logits.grad[0, :2].abs().sum() > 0


def test_noam_peaks_at_warmup_and_decays_as_inverse_sqrt():
    d, w = 512, 4000
    peak = noam_lr(w, d, w)
    assert peak == pytest.approx(d**-0.5 * w**-0.5)
    assert noam_lr(w // 2, d, w) == pytest.approx(peak / 2)
    assert noam_lr(4 * w, d, w) == pytest.approx(peak / 2)
    assert max(noam_lr(s, d, w) for s in range(1, 3 * w)) == pytest.approx(peak)


def test_inverse_sqrt_equals_noam_with_matching_peak():
    d, w = 256, 100
    peak = (d * w) ** -0.5
    for step in (1, 7, 50, 100, 101, 1000, 12345):
        assert inverse_sqrt_lr(step, peak, w) == pytest.approx(noam_lr(step, d, w), rel=1e-9)


def test_learning_rate_rejects_unknown_schedule():
    with pytest.raises(ValueError, match="noam"):
        learning_rate(1, OptimConfig(schedule="cosine"), 512)
    assert learning_rate(1, OptimConfig(schedule="noam", warmup_updates=4), 16) == pytest.approx(
        16**-0.5 * 1 * 4**-1.5
    )
    assert math.isfinite(learning_rate(10**7, OptimConfig(schedule="inverse_sqrt"), 16))


def reference_loss(logits, target, epsilon, ignore_index):
    """The textbook form: full log-probabilities, gather and sum (what fairseq writes)."""
    lprobs = F.log_softmax(logits.float(), dim=-1)
    keep = target.ne(ignore_index)
    gold = target.masked_fill(~keep, 0).unsqueeze(-1)
    nll = -lprobs.gather(-1, gold).squeeze(-1)
    smooth = -lprobs.sum(-1)
    e = epsilon / (lprobs.size(-1) - 1)
    loss = (1 - epsilon - e) * nll + e * smooth
    return loss[keep].sum(), nll[keep].sum()


@pytest.mark.parametrize("epsilon", [0.0, 0.1, 0.3])
def test_fused_loss_equals_reference_in_value_and_gradient(epsilon):
    torch.manual_seed(3)
    logits = (3 * torch.randn(4, 7, 50)).requires_grad_()
    target = torch.randint(1, 50, (4, 7))
    target[0, 4:] = 0
    target[2, 1:] = 0
    loss, nll = label_smoothed_nll_loss(logits, target, epsilon, ignore_index=0)
    ref_loss, ref_nll = reference_loss(logits, target, epsilon, 0)
    assert torch.allclose(loss, ref_loss, atol=1e-4) and torch.allclose(nll, ref_nll, atol=1e-4)
    for out, ref in ((loss, ref_loss), (nll, ref_nll), (loss + 0.5 * nll, ref_loss + 0.5 * ref_nll)):
        (g,) = torch.autograd.grad(out, logits, retain_graph=True)
        (g_ref,) = torch.autograd.grad(ref, logits, retain_graph=True)
        assert torch.allclose(g, g_ref, atol=1e-5)


def test_fused_loss_passes_gradcheck():
    logits = torch.randn(5, 6, dtype=torch.float64, requires_grad=True)
    target = torch.tensor([1, 2, 0, 5, 3])
    keep = target.ne(0)
    from mt.train.loss import _SmoothedNLL

    assert torch.autograd.gradcheck(lambda z: _SmoothedNLL.apply(z, target, keep, 0.1), (logits,))


def _output_loss_reference(hidden, weight, target, epsilon):
    logits = torch.nn.functional.linear(hidden, weight)  # (B, T, V)
    return label_smoothed_nll_loss(logits, target, epsilon, ignore_index=0)


@pytest.mark.parametrize("chunk_bytes", [4 * 11 * 5, 4 * 11 * 16, 2**20])  # chunks of 16 rows (the floor), 16, all
def test_chunked_output_loss_equals_the_logits_path_in_value_and_gradient(chunk_bytes):
    from mt.train.loss import output_loss

    torch.manual_seed(0)
    hidden = torch.randn(3, 13, 8, requires_grad=True)  # 39 rows: chunks do not divide it
    weight = torch.randn(11, 8, requires_grad=True)
    target = torch.randint(1, 11, (3, 13))
    target[2, 6:] = 0  # padding
    loss, nll = output_loss(hidden, weight, target, 0.1, ignore_index=0, chunk_bytes=chunk_bytes)
    (2.5 * loss).backward()  # an upstream scale (fp16's grad scaler) reaches both gradients
    grads = hidden.grad.clone(), weight.grad.clone()
    hidden.grad = weight.grad = None
    ref_loss, ref_nll = _output_loss_reference(hidden, weight, target, 0.1)
    (2.5 * ref_loss).backward()
    assert torch.allclose(loss, ref_loss, rtol=1e-6) and torch.allclose(nll, ref_nll, rtol=1e-6)
    for grad, ref_grad in zip(grads, (hidden.grad, weight.grad), strict=True):
        # float32 sums of terms up to ~10: a few ulps of the largest entry (AMD's and Intel's kernels round apart)
        assert torch.allclose(grad, ref_grad, rtol=0, atol=1e-6 * ref_grad.abs().max().item())
    assert not nll.requires_grad


def test_a_logits_bias_with_dead_rows_equals_a_vocabulary_without_them():
    """An imported model's fixed bias: its -inf rows are no classes (the smoothing spreads over the others), and
    the loss and gradients equal those of the same model whose vocabulary never had those rows."""
    from mt.train.loss import output_loss

    torch.manual_seed(0)
    hidden = torch.randn(3, 13, 8, requires_grad=True)
    weight = torch.randn(11, 8, requires_grad=True)
    bias = torch.randn(11)
    dead = [0, 2, 10]  # mt's <pad> and <s> copy, a row past the pieces: never targets
    bias[dead] = float("-inf")
    live = [i for i in range(11) if i not in dead]
    target = torch.tensor(live)[torch.randint(0, len(live), (3, 13))]
    target[2, 6:] = 0  # padding (ignore_index 0, itself a dead row)
    loss, nll = output_loss(hidden, weight, target, 0.1, ignore_index=0, chunk_bytes=4 * 11 * 16, bias=bias)
    loss.backward()
    grads = hidden.grad.clone(), weight.grad[live].clone()
    assert bool((weight.grad[dead] == 0).all())  # a dead row takes no probability, so no gradient
    hidden.grad = weight.grad = None
    keep = target != 0
    lprobs = F.log_softmax(F.linear(hidden, weight[live], bias[live])[keep], dim=-1)  # (N, 8): the live classes
    column = {c: i for i, c in enumerate(live)}
    y = torch.tensor([column[int(t)] for t in target[keep]])
    ref_nll = -lprobs.gather(1, y[:, None]).sum()
    e = 0.1 / (len(live) - 1)  # fairseq's smoothing: eps over the other classes
    ref_loss = (1 - 0.1 - e) * ref_nll - e * lprobs.sum()
    ref_loss.backward()
    assert torch.allclose(loss, ref_loss, rtol=1e-6) and torch.allclose(nll, ref_nll, rtol=1e-6)
    assert torch.isfinite(loss)
    assert torch.allclose(grads[0], hidden.grad, atol=1e-6) and torch.allclose(grads[1], weight.grad[live], atol=1e-6)


@pytest.mark.parametrize("epsilon", [0.0, 0.1])
def test_losses_read_off_the_softmax_equal_token_losses(epsilon):
    from mt.train.loss import softmax_losses, token_losses

    torch.manual_seed(0)
    z = 4 * torch.randn(40, 30)
    z[3], z[7, :] = 0.0, 50.0  # a flat row; a row where the target (below) is far behind: p_y underflows
    target = torch.randint(0, 30, (40, 1))
    z[7, target[7, 0]] = -150.0
    probs, loss, nll = softmax_losses(z, target, epsilon)
    ref_loss, ref_nll, _ = token_losses(z, target, epsilon)
    assert torch.allclose(probs, torch.softmax(z, dim=-1))
    assert torch.allclose(nll, ref_nll, rtol=1e-5, atol=1e-5) and torch.allclose(loss, ref_loss, rtol=1e-5, atol=1e-5)
    assert torch.isfinite(nll).all() and nll[7].item() == pytest.approx(200.0 + math.log(29), rel=1e-5)


def test_chunked_output_loss_under_bf16_autocast_is_close_to_float32():
    from mt.train.loss import output_loss

    torch.manual_seed(0)
    hidden = torch.randn(4, 20, 32, requires_grad=True)
    weight = (0.2 * torch.randn(50, 32)).requires_grad_()
    target = torch.randint(1, 50, (4, 20))
    with torch.autocast("cpu", dtype=torch.bfloat16):
        loss, _ = output_loss(hidden, weight, target, 0.1, ignore_index=0, chunk_bytes=4 * 50 * 16)
    loss.backward()
    assert loss.dtype == torch.float32 and hidden.grad.dtype == torch.float32 and weight.grad.dtype == torch.float32
    bf16 = loss.detach(), hidden.grad.clone(), weight.grad.clone()
    hidden.grad = weight.grad = None
    ref, _ = _output_loss_reference(hidden, weight, target, 0.1)
    ref.backward()
    assert torch.allclose(bf16[0], ref, rtol=1e-2)
    assert torch.allclose(bf16[1], hidden.grad, rtol=0.05, atol=0.05 * hidden.grad.abs().max().item())
    assert torch.allclose(bf16[2], weight.grad, rtol=0.05, atol=0.05 * weight.grad.abs().max().item())


def test_budget_decay_factor_falls_from_one_to_zero():
    assert budget_factor(0.0, "none") == budget_factor(0.7, "none") == 1.0
    assert [budget_factor(p, "linear") for p in (0.0, 0.25, 1.0, 2.0)] == [1.0, 0.75, 0.0, 0.0]
    assert budget_factor(0.5, "cosine") == pytest.approx(0.5)
    assert budget_factor(1.0, "cosine") == pytest.approx(0.0, abs=1e-12)
    with pytest.raises(ValueError, match="budget_decay"):
        budget_factor(0.1, "step")


def test_budget_progress_takes_the_limit_that_ends_first():
    by_updates = TrainConfig(max_updates=1000, max_time_minutes=0.0)
    assert budget_progress(250, 10_000.0, by_updates) == 0.25  # no time limit: seconds do not count
    both = TrainConfig(max_updates=100_000, max_time_minutes=10.0)
    assert budget_progress(250, 300.0, both) == pytest.approx(0.5)  # 5 of 10 minutes
    assert budget_progress(90_000, 60.0, both) == pytest.approx(0.9)
    assert budget_progress(10, 1e9, both) == 1.0


def test_learning_rate_multiplies_the_schedule_by_the_budget_factor():
    plain = OptimConfig(schedule="inverse_sqrt", lr=5e-3, warmup_updates=100)
    decayed = OptimConfig(schedule="inverse_sqrt", lr=5e-3, warmup_updates=100, budget_decay="linear")
    for step, progress in ((1, 0.0), (100, 0.1), (400, 0.4), (999, 0.999)):
        expected = learning_rate(step, plain, 16) * (1 - progress)
        assert learning_rate(step, decayed, 16, progress) == pytest.approx(expected, rel=1e-12)
    assert learning_rate(400, plain, 16, progress=0.9) == learning_rate(400, plain, 16)  # none: no decay
