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
    logit_gradient_,
    token_losses,
)


def doubled(*tensors: torch.Tensor) -> tuple[torch.Tensor, ...]:
    """Each (B, ...) tensor as (2B, ...): the batch, then the same batch again."""
    return tuple(torch.cat([t, t]) for t in tensors)


def _pair_gradients(
    p1: torch.Tensor, p2: torch.Tensor, d: torch.Tensor, kl12: torch.Tensor, kl21: torch.Tensor
) -> tuple[torch.Tensor, torch.Tensor]:
    """d(KL_12 + KL_21)/dz for both copies' logits, from softmax rows p1, p2 (C, V), d = log p1 - log p2
    (C, V) and the per-row divergences (C,) (the module docstring's formulas)."""
    g1 = p1 * (d - kl12.unsqueeze(1)) + p1 - p2  # (C, V)
    g2 = p2 * (d.neg() - kl21.unsqueeze(1)) + p2 - p1  # (C, V)
    return g1, g2


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
                kl12, kl21 = (p1 * d).sum(dim=-1), (p2 * d).sum(dim=-1).neg_()  # (C,) each
                loss = 0.5 * (loss1 + loss2) + 0.25 * alpha * (kl12 + kl21)  # (C,)
                loss_sum += torch.where(k, loss, 0.0).sum()
                nll_sum += torch.where(k, 0.5 * (nll1 + nll2), 0.0).sum()
                kl_g1, kl_g2 = _pair_gradients(p1, p2, d, kl12, kl21)
                kl_weight = (0.25 * alpha) * k.unsqueeze(1).to(acc)  # (C, 1): padding rows get no gradient
                g1 = logit_gradient_(p1, t, k, epsilon, 0.5, 0.0).add_(kl_g1.mul_(kl_weight)).to(dtype)
                g2 = logit_gradient_(p2, t, k, epsilon, 0.5, 0.0).add_(kl_g2.mul_(kl_weight)).to(dtype)
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
