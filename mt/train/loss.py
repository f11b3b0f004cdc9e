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

A model with a fixed logits bias (``model.logits_bias``, an imported model's) adds it to the logits; its
``-inf`` rows are no classes at all: ``live`` (V,) marks the others, and ``V`` above counts only them.
"""

from __future__ import annotations

import torch


def smoothing_weights(epsilon: float, vocab: int) -> tuple[float, float]:
    """``(on_target, e)``: one token's loss is ``on_target * nll + e * smooth`` (see the module docstring)."""
    eps_other = epsilon / (vocab - 1)
    return 1.0 - epsilon - eps_other, eps_other


def live_classes(bias: torch.Tensor | None) -> torch.Tensor | None:
    """The rows (V,) a logits bias leaves as classes (its finite entries); None without a bias."""
    return None if bias is None else torch.isfinite(bias)


def token_losses(z: torch.Tensor, target: torch.Tensor, epsilon: float, live: torch.Tensor | None = None):
    """Per-row ``(loss, nll, lse)`` of logits z (N, V) against target (N, 1) (the module docstring's formula)."""
    lse = torch.logsumexp(z, dim=-1)  # (N,)
    nll = lse - z.gather(1, target).squeeze(1)  # (N,)
    return smoothed_loss(z, nll, lse, epsilon, live), nll, lse


def smoothed_loss(z: torch.Tensor, nll: torch.Tensor, lse: torch.Tensor, epsilon: float,
                  live: torch.Tensor | None = None) -> torch.Tensor:
    """Per-row ``on_target * nll + e * smooth`` with ``smooth = V * lse - sum_j z_j`` (the module docstring),
    over the ``live`` classes only when given."""
    classes = z.size(-1) if live is None else int(live.sum())
    on_target, eps_other = smoothing_weights(epsilon, classes)
    total = z.sum(dim=-1) if live is None else torch.where(live, z, 0.0).sum(dim=-1)  # (N,)
    return on_target * nll + eps_other * (classes * lse - total)


# below this a float32 softmax entry has lost its precision (denormal) or is 0: such rows take logsumexp instead
TINY_PROB = 1e-30


def softmax_losses(z: torch.Tensor, target: torch.Tensor, epsilon: float, live: torch.Tensor | None = None):
    """``(probs, loss, nll)`` of logits z (N, V) against target (N, 1): the softmax (N, V) in a new tensor and
    ``token_losses``' per-row loss and NLL, read off the softmax (``nll = -log p_y``, ``lse = z_y + nll``), so
    the rows are exponentiated once, in one fused kernel, where ``token_losses`` then ``exp(z - lse)`` take
    two passes (and ``logsumexp`` several). A row whose target probability underflows gets its NLL from
    ``logsumexp``, as ``token_losses`` computes it."""
    probs = torch.softmax(z, dim=-1)  # (N, V)
    z_y = z.gather(1, target).squeeze(1)  # (N,)
    p_y = probs.gather(1, target).squeeze(1)  # (N,)
    nll = -torch.log(p_y)  # (N,)
    tiny = (p_y < TINY_PROB).nonzero().squeeze(1)
    if tiny.numel():
        nll[tiny] = torch.logsumexp(z[tiny], dim=-1) - z_y[tiny]
    return probs, smoothed_loss(z, nll, z_y + nll, epsilon, live), nll


def logit_gradient_(probs: torch.Tensor, target: torch.Tensor, keep: torch.Tensor, epsilon: float,
                    g_loss, g_nll, live: torch.Tensor | None = None) -> torch.Tensor:
    """In place: softmax rows probs (N, V) -> d(g_loss * loss_sum + g_nll * nll_sum)/dz; rows with keep=False 0;
    with ``live``, the smoothing spreads over the live classes only."""
    classes = probs.size(-1) if live is None else int(live.sum())
    on_target, eps_other = smoothing_weights(epsilon, classes)
    probs.mul_(g_loss * (on_target + eps_other * classes) + g_nll)
    probs.sub_(g_loss * eps_other if live is None else (g_loss * eps_other) * live.to(probs.dtype))
    onehot_coef = torch.as_tensor(-(g_loss * on_target + g_nll), dtype=probs.dtype)  # d/dz_y of both sums
    probs.scatter_add_(1, target, onehot_coef.expand(target.shape))
    dropped = (~keep).nonzero().squeeze(1)  # (M,) the padding rows: zeroed alone, not a pass over all rows
    return probs.index_fill_(0, dropped, 0.0) if dropped.numel() else probs


class _SmoothedNLL(torch.autograd.Function):
    """Summed smoothed loss and NLL of logits (N, V) against target (N,), rows with keep=False ignored."""

    @staticmethod
    def forward(ctx, logits: torch.Tensor, target: torch.Tensor, keep: torch.Tensor, epsilon: float,
                live: torch.Tensor | None = None):
        loss, nll, lse = token_losses(logits, target.unsqueeze(1), epsilon, live)
        zero = logits.new_zeros(())
        ctx.save_for_backward(logits, lse, target, keep)
        ctx.epsilon, ctx.live = epsilon, live
        return torch.where(keep, loss, zero).sum(), torch.where(keep, nll, zero).sum()

    @staticmethod
    def backward(ctx, grad_loss: torch.Tensor, grad_nll: torch.Tensor):
        logits, lse, target, keep = ctx.saved_tensors
        g_loss = grad_loss if grad_loss is not None else logits.new_zeros(())
        g_nll = grad_nll if grad_nll is not None else logits.new_zeros(())
        probs = torch.exp(logits - lse.unsqueeze(1))  # (N, V) softmax
        grad = logit_gradient_(probs, target.unsqueeze(1), keep, ctx.epsilon, g_loss, g_nll, ctx.live)
        return grad, None, None, None, None


def label_smoothed_nll_loss(
    logits: torch.Tensor, target: torch.Tensor, epsilon: float, ignore_index: int, live: torch.Tensor | None = None
) -> tuple[torch.Tensor, torch.Tensor]:
    """Summed smoothed loss and summed NLL over the non-pad target tokens.

    Args:
        logits: (B, T, V) unnormalised scores (computed in float32 even under autocast).
        target: (B, T) gold ids; positions equal to ``ignore_index`` contribute nothing.
        epsilon: smoothing mass taken from the target.
        live: (V,) the classes the smoothing spreads over (``live_classes`` of a logits bias); None: all.
    Returns:
        ``(loss_sum, nll_sum)``, both scalars (natural log). The caller divides by the number of
        non-pad target tokens of the whole update, so accumulation and data parallelism give the
        large-batch gradient.
    """
    vocab = logits.size(-1)
    flat = logits.reshape(-1, vocab).float()  # (B*T, V)
    target = target.reshape(-1)  # (B*T,)
    keep = target.ne(ignore_index)
    return _SmoothedNLL.apply(flat, target.masked_fill(~keep, 0), keep, float(epsilon), live)


class _ChunkedOutputLoss(torch.autograd.Function):
    """The summed smoothed loss of ``hidden @ weight^T`` and its NLL, ``chunk`` rows of logits at a time.

    The gradient is formed in the forward pass (the loss is the graph's last node, so its upstream
    gradient is one scalar): per chunk, ``dL/dz`` (``logit_gradient_``, as in ``_SmoothedNLL.backward``),
    then ``dL/dh = dL/dz @ W`` and ``dL/dW += dL/dz^T @ h``; backward only scales the saved (N, D) and
    (V, D) gradients. No (N, V) tensor ever exists whole. Matmuls run in ``dtype`` (bf16 under autocast),
    the softmax and the sums in float32 (float64 for float64 inputs). The NLL is not differentiable.
    """

    @staticmethod
    def forward(ctx, hidden, weight, target, keep, epsilon: float, chunk: int, dtype: torch.dtype, bias=None):
        acc = torch.promote_types(dtype, torch.float32)  # the softmax's dtype: float32, or float64 in tests
        live = live_classes(bias)
        bias = None if bias is None else bias.to(acc)  # (V,), fixed
        with torch.autocast(hidden.device.type, enabled=False):
            w = weight.to(dtype)  # (V, D)
            grad_hidden = torch.empty_like(hidden)  # (N, D)
            grad_weight = torch.zeros_like(weight, dtype=acc)  # (V, D)
            loss_sum = hidden.new_zeros((), dtype=acc)
            nll_sum = hidden.new_zeros((), dtype=acc)
            for start in range(0, hidden.size(0), chunk):
                rows = slice(start, start + chunk)
                h, t, k = hidden[rows].to(dtype), target[rows].unsqueeze(1), keep[rows]  # (C, D), (C, 1), (C,)
                z = (h @ w.t()).to(acc)  # (C, V)
                if bias is not None:
                    z += bias
                probs, loss, nll = softmax_losses(z, t, epsilon, live)  # (C, V), (C,), (C,)
                loss_sum += torch.where(k, loss, 0.0).sum()
                nll_sum += torch.where(k, nll, 0.0).sum()
                g = logit_gradient_(probs, t, k, epsilon, 1.0, 0.0, live).to(dtype)
                grad_hidden[rows] = g @ w  # (C, D)
                grad_weight += g.t() @ h  # (V, D)
        return keep_formed_gradients(ctx, grad_hidden, grad_weight, weight.dtype, loss_sum, nll_sum)

    @staticmethod
    def backward(ctx, grad_loss: torch.Tensor, _grad_nll: torch.Tensor):
        return *formed_gradients(ctx, grad_loss), None, None, None, None, None, None


def output_loss(
    hidden: torch.Tensor, weight: torch.Tensor, target: torch.Tensor, epsilon: float, ignore_index: int,
    chunk_bytes: int = 8 * 2**20, bias: torch.Tensor | None = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """``label_smoothed_nll_loss(hidden @ weight^T, ...)`` without the (B*T, V) logits, for training; padding
    positions are left out before the projection (their gradient is zero).

    Args:
        hidden: (B, T, D) the decoder's last hidden states (``model(..., project_output=False)``).
        weight: (V, D) the output projection (the tied target embedding).
        target: (B, T) gold ids, ``ignore_index`` for padding.
        chunk_bytes: the float32 logits of one chunk of rows (8 MiB: 262 rows of an 8k vocabulary).
        bias: (V,) the model's fixed logits bias (``Decoder.logits_bias``), not trained; None: no bias.
    Returns:
        ``(loss_sum, nll_sum)`` as ``label_smoothed_nll_loss``; only the loss has a gradient. Under autocast
        the matmuls run in its dtype, as ``F.linear`` would.
    """
    flat, target, keep, chunk, dtype = chunked_loss_inputs(hidden, weight, target, ignore_index, chunk_bytes)
    rows = keep.nonzero().squeeze(1)  # (K,) the positions that are not padding: only they are projected
    if rows.numel() < keep.numel():
        flat, target, keep = flat.index_select(0, rows), target.index_select(0, rows), keep.index_select(0, rows)
    return _ChunkedOutputLoss.apply(flat, weight, target, keep, float(epsilon), chunk, dtype, bias)


def chunked_loss_inputs(
    hidden: torch.Tensor, weight: torch.Tensor, target: torch.Tensor, ignore_index: int, chunk_bytes: int
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, int, torch.dtype]:
    """What a chunked loss takes: hidden (..., D) as rows (N, D), target (...) as (M,) with padding set to
    id 0, ``keep`` (M,) (False at padding), rows per chunk (``chunk_bytes`` of float32 logits, at least 16)
    and the matmuls' dtype (autocast's, or the weight's)."""
    device = hidden.device.type
    dtype = torch.get_autocast_dtype(device) if torch.is_autocast_enabled(device) else weight.dtype
    target = target.reshape(-1)  # (M,)
    keep = target.ne(ignore_index)
    chunk = max(16, chunk_bytes // (4 * weight.size(0)))
    return hidden.reshape(-1, hidden.size(-1)), target.masked_fill(~keep, 0), keep, chunk, dtype


def keep_formed_gradients(ctx, grad_hidden, grad_weight, weight_dtype: torch.dtype, loss_sum, nll_sum):
    """A chunked loss's forward end: saves the gradients it formed; returns ``(loss_sum, nll_sum)``."""
    ctx.save_for_backward(grad_hidden, grad_weight)
    ctx.weight_dtype = weight_dtype
    ctx.mark_non_differentiable(nll_sum)
    return loss_sum, nll_sum


def formed_gradients(ctx, grad_loss: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """A chunked loss's backward: the saved gradients of hidden and weight, scaled by the upstream one."""
    grad_hidden, grad_weight = ctx.saved_tensors
    return grad_hidden * grad_loss, (grad_weight * grad_loss).to(ctx.weight_dtype)
