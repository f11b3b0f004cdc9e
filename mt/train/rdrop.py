"""R-Drop (Liang et al. 2021, "R-Drop: Regularized Dropout for Neural Networks"), ``optim.rdrop_alpha``.

Every batch goes through the model twice, as one batch of twice the rows (``doubled``), so each copy gets
its own dropout masks, and the loss adds the symmetric KL divergence between the two copies' output
distributions at every target token:

    per token: (CE_1 + CE_2) / 2 + alpha / 4 * (KL(p_1 || p_2) + KL(p_2 || p_1))

CE is the label-smoothed loss of ``mt.train.loss``. This is the paper's ``NLL_1 + NLL_2 + alpha / 2 * (KL_12 +
KL_21)`` halved (and fairseq's ``rdrop_alpha``): one copy's scale, so the learning rate and the logged loss
mean what they mean without it (the logged loss includes the KL term; the NLL is the two copies' mean).
An update costs about twice the compute of one without it.

As in ``mt.train.loss.output_loss``, the gradient is formed in the forward pass, a chunk of rows at a time,
and no (N, V) tensor exists whole. With p = softmax(z) and d = log p_1 - log p_2 (rows of one token):

    d(KL_12 + KL_21)/dz_1 = p_1 * (d - KL_12) + p_1 - p_2
    d(KL_12 + KL_21)/dz_2 = p_2 * (-d - KL_21) + p_2 - p_1
"""

from __future__ import annotations

import torch

from mt.train.loss import (
    chunked_loss_inputs,
    formed_gradients,
    keep_formed_gradients,
    smoothing_weights,
    token_losses,
)


def doubled(*tensors: torch.Tensor) -> tuple[torch.Tensor, ...]:
    """Each (B, ...) tensor as (2B, ...): the batch, then the same batch again."""
    return tuple(torch.cat([t, t]) for t in tensors)


def row_dot(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """Per-row dot products of (C, V) a and b, (C,), without a (C, V) product in memory."""
    return (a.unsqueeze(1) @ b.unsqueeze(2)).view(-1)


def _pair_gradients_(
    p1: torch.Tensor, p2: torch.Tensor, d: torch.Tensor, kl12: torch.Tensor, kl21: torch.Tensor,
    target: torch.Tensor, keep: torch.Tensor, epsilon: float, alpha: float,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Both copies' logit gradients of the chunk's summed loss, from softmax rows p1, p2 (C, V), d = log p1 -
    log p2 (C, V, overwritten by the second copy's gradient) and the per-row divergences (C,).

    Each copy's is half its smoothed CE's, ``(p - q) / 2`` (q the smoothed target), plus ``alpha / 4`` times the
    module docstring's KL gradient; gathered per row: ``g1 = p1 * (r1 + a d) - a p2 - e / 2 - onehot * o / 2``
    with ``a = alpha / 4``, ``r1 = s / 2 + a (1 - KL_12)``, and the mirror image for g2, each pass over (C, V)
    once where the terms one at a time would take about twice as many. Rows with keep=False get 0.
    """
    on_target, eps_other = smoothing_weights(epsilon, p1.size(-1))
    scale = 0.5 * (on_target + eps_other * p1.size(-1))  # half the CE gradient's factor on p
    k = keep.unsqueeze(1).to(p1.dtype)  # (C, 1)
    a = (0.25 * alpha) * k  # (C, 1)
    r1 = k * scale + a * (1.0 - kl12.unsqueeze(1))  # (C, 1)
    r2 = k * scale + a * (1.0 - kl21.unsqueeze(1))
    uniform = (0.5 * eps_other) * k  # (C, 1)
    onehot = (-0.5 * on_target) * k  # (C, 1)
    g1 = torch.addcmul(r1, d, a).mul_(p1).addcmul_(p2, a, value=-1.0).sub_(uniform)  # (C, V)
    g2 = d.mul_(a.neg()).add_(r2).mul_(p2).addcmul_(p1, a, value=-1.0).sub_(uniform)  # (C, V), in d's memory
    return g1.scatter_add_(1, target, onehot), g2.scatter_add_(1, target, onehot)


class _ChunkedRDropLoss(torch.autograd.Function):
    """The summed R-Drop loss of ``hidden @ weight^T`` and the two copies' mean NLL, ``chunk`` rows at a time.

    hidden (2N, D): rows ``0 .. N-1`` are the first copy's, ``N .. 2N-1`` the second's, both against
    target / keep (N,). Forms the gradient in the forward pass, as ``mt.train.loss._ChunkedOutputLoss``.
    """

    @staticmethod
    def forward(ctx, hidden, weight, target, keep, epsilon: float, alpha: float, chunk: int, dtype: torch.dtype):
        acc = torch.promote_types(dtype, torch.float32)  # softmax and sums: float32, or float64 in tests
        n = target.size(0)
        with torch.autocast(hidden.device.type, enabled=False):
            w = weight.to(dtype)  # (V, D)
            grad_hidden = torch.empty_like(hidden)  # (2N, D)
            grad_weight = torch.zeros_like(weight, dtype=acc)  # (V, D)
            loss_sum = hidden.new_zeros((), dtype=acc)
            nll_sum = hidden.new_zeros((), dtype=acc)
            for start in range(0, n, chunk):
                end = min(start + chunk, n)
                first, second = slice(start, end), slice(n + start, n + end)
                t, k = target[first].unsqueeze(1), keep[first]  # (C, 1), (C,)
                h1, h2 = hidden[first].to(dtype), hidden[second].to(dtype)  # (C, D) each
                z1, z2 = (h1 @ w.t()).to(acc), (h2 @ w.t()).to(acc)  # (C, V) each
                loss1, nll1, lse1 = token_losses(z1, t, epsilon)  # (C,) each
                loss2, nll2, lse2 = token_losses(z2, t, epsilon)
                logp1 = z1.sub_(lse1.unsqueeze(1))  # (C, V), in z1's memory
                logp2 = z2.sub_(lse2.unsqueeze(1))
                d = logp1 - logp2  # (C, V)
                p1, p2 = logp1.exp_(), logp2.exp_()  # (C, V) softmax rows, in place
                kl12, kl21 = row_dot(p1, d), row_dot(p2, d).neg_()  # (C,) each
                loss = 0.5 * (loss1 + loss2) + 0.25 * alpha * (kl12 + kl21)  # (C,)
                loss_sum += torch.where(k, loss, 0.0).sum()
                nll_sum += torch.where(k, 0.5 * (nll1 + nll2), 0.0).sum()
                g1, g2 = _pair_gradients_(p1, p2, d, kl12, kl21, t, k, epsilon, alpha)  # (C, V) each
                g1, g2 = g1.to(dtype), g2.to(dtype)
                grad_hidden[first], grad_hidden[second] = g1 @ w, g2 @ w  # (C, D) each
                grad_weight += g1.t() @ h1 + g2.t() @ h2  # (V, D)
        return keep_formed_gradients(ctx, grad_hidden, grad_weight, weight.dtype, loss_sum, nll_sum)

    @staticmethod
    def backward(ctx, grad_loss: torch.Tensor, _grad_nll: torch.Tensor):
        return *formed_gradients(ctx, grad_loss), None, None, None, None, None, None


def rdrop_output_loss(
    hidden: torch.Tensor, weight: torch.Tensor, target: torch.Tensor, epsilon: float, alpha: float,
    ignore_index: int, chunk_bytes: int = 8 * 2**20,
) -> tuple[torch.Tensor, torch.Tensor]:
    """The R-Drop loss of a ``doubled`` batch's decoder output, without the logits.

    Args:
        hidden: (2B, T, D) the decoder's last hidden states of the doubled batch (the B rows, then again).
        weight: (V, D) the output projection.
        target: (B, T) gold ids of the batch (once), ``ignore_index`` for padding.
        alpha: the weight of the KL term (the paper's alpha; 0 gives the mean of the two copies' CE).
        chunk_bytes: the float32 logits of one copy's chunk of rows (both copies' are alive at once).
    Returns:
        ``(loss_sum, nll_sum)`` summed over the batch's non-pad target tokens (counted once), as
        ``mt.train.loss.output_loss``; only the loss has a gradient.
    """
    batch, length = target.shape
    if hidden.size(0) != 2 * batch or hidden.size(1) != length:
        raise ValueError(f"R-Drop expects hidden of {2 * batch} x {length} rows, got {tuple(hidden.shape[:2])}")
    # flat (2B*T, D): the first copy's B*T rows, then the second's; target and keep (B*T,)
    flat, target, keep, chunk, dtype = chunked_loss_inputs(hidden, weight, target, ignore_index, chunk_bytes)
    return _ChunkedRDropLoss.apply(flat, weight, target, keep, float(epsilon), float(alpha), chunk, dtype)
