"""Label-smoothed cross-entropy (Szegedy et al. 2016; the paper's Section 5.4, eps_ls = 0.1).

Smoothing formula: the target keeps probability ``1 - eps`` and the other ``V - 1`` classes share
``eps`` evenly, ``eps / (V - 1)`` each (fairseq's ``label_smoothed_nll_loss``). PyTorch's
``cross_entropy(label_smoothing=eps)`` instead spreads ``eps / V`` over all classes, target included.

With ``e = eps / (V - 1)`` and ``lse = logsumexp(z)``, one token's loss is
``(1 - eps - e) * nll + e * smooth`` where ``nll = lse - z_y`` and ``smooth = -sum_j log p_j =
V * lse - sum_j z_j``. Written this way no (N, V) log-probability tensor is kept, and the gradient
``(1 - eps - e + e * V) * softmax(z) - (1 - eps - e) * onehot(y) - e`` is formed in one pass: on the
(B*T, V) logits of a training batch the softmax is the loss's whole cost (it was 19% of an update
of a d=128 model with ``log_softmax`` + autograd).
"""

from __future__ import annotations

import torch


class _SmoothedNLL(torch.autograd.Function):
    """Summed smoothed loss and NLL of logits (N, V) against target (N,), rows with keep=False ignored."""

    @staticmethod
    def forward(ctx, logits: torch.Tensor, target: torch.Tensor, keep: torch.Tensor, epsilon: float):
        vocab = logits.size(-1)
        lse = torch.logsumexp(logits, dim=-1)  # (N,)
        nll = lse - logits.gather(1, target.unsqueeze(1)).squeeze(1)  # (N,)
        smooth = vocab * lse - logits.sum(dim=-1)  # (N,)
        eps_other = epsilon / (vocab - 1)
        loss = (1.0 - epsilon - eps_other) * nll + eps_other * smooth
        zero = logits.new_zeros(())
        ctx.save_for_backward(logits, lse, target, keep)
        ctx.epsilon = epsilon
        return torch.where(keep, loss, zero).sum(), torch.where(keep, nll, zero).sum()

    @staticmethod
    def backward(ctx, grad_loss: torch.Tensor, grad_nll: torch.Tensor):
        logits, lse, target, keep = ctx.saved_tensors
        vocab = logits.size(-1)
        eps_other = ctx.epsilon / (vocab - 1)
        on_target = 1.0 - ctx.epsilon - eps_other
        g_loss = grad_loss if grad_loss is not None else logits.new_zeros(())
        g_nll = grad_nll if grad_nll is not None else logits.new_zeros(())
        grad = torch.exp(logits - lse.unsqueeze(1))  # (N, V) softmax
        grad.mul_(g_loss * (on_target + eps_other * vocab) + g_nll).sub_(g_loss * eps_other)
        onehot_coef = -(g_loss * on_target + g_nll)  # d/dz_y of both sums
        grad.scatter_add_(1, target.unsqueeze(1), onehot_coef.expand(target.size(0), 1).to(grad.dtype))
        grad.mul_(keep.unsqueeze(1).to(grad.dtype))
        return grad, None, None, None


def label_smoothed_nll_loss(
    logits: torch.Tensor, target: torch.Tensor, epsilon: float, ignore_index: int
) -> tuple[torch.Tensor, torch.Tensor]:
    """Summed smoothed loss and summed NLL over the non-pad target tokens.

    Args:
        logits: (B, T, V) unnormalised scores (computed in float32 even under autocast).
        target: (B, T) gold ids; positions equal to ``ignore_index`` contribute nothing.
        epsilon: smoothing mass taken from the target.
    Returns:
        ``(loss_sum, nll_sum)``, both scalars (natural log). The caller divides by the number of
        non-pad target tokens of the whole update, so accumulation and data parallelism give the
        large-batch gradient.
    """
    vocab = logits.size(-1)
    flat = logits.reshape(-1, vocab).float()  # (B*T, V)
    target = target.reshape(-1)  # (B*T,)
    keep = target.ne(ignore_index)
    return _SmoothedNLL.apply(flat, target.masked_fill(~keep, 0), keep, float(epsilon))
