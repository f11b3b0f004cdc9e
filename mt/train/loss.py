"""Label-smoothed cross-entropy (Szegedy et al. 2016; the paper's Section 5.4, eps_ls = 0.1).

Smoothing formula: the target keeps probability ``1 - eps`` and the other ``V - 1`` classes share
``eps`` evenly, ``eps / (V - 1)`` each (fairseq's ``label_smoothed_nll_loss``). PyTorch's
``cross_entropy(label_smoothing=eps)`` instead spreads ``eps / V`` over all classes, target included.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F


def label_smoothed_nll_loss(
    logits: torch.Tensor, target: torch.Tensor, epsilon: float, ignore_index: int
) -> tuple[torch.Tensor, torch.Tensor]:
    """Summed smoothed loss and summed NLL over the non-pad target tokens.

    Args:
        logits: (B, T, V) unnormalised scores.
        target: (B, T) gold ids; positions equal to ``ignore_index`` contribute nothing.
        epsilon: smoothing mass taken from the target.
    Returns:
        ``(loss_sum, nll_sum)``, both scalars. The caller divides by the number of non-pad target
        tokens of the whole update, so accumulation and data parallelism give the large-batch gradient.
    """
    lprobs = F.log_softmax(logits.float(), dim=-1)  # (B, T, V), float32 even under autocast
    vocab = lprobs.size(-1)
    keep = target.ne(ignore_index)  # (B, T)
    gold = target.masked_fill(~keep, 0).unsqueeze(-1)  # (B, T, 1)
    nll = -lprobs.gather(dim=-1, index=gold).squeeze(-1)  # (B, T)
    smooth = -lprobs.sum(dim=-1)  # (B, T): -sum_j log p_j
    eps_other = epsilon / (vocab - 1)
    loss = (1.0 - epsilon - eps_other) * nll + eps_other * smooth  # (B, T)
    zero = torch.zeros((), dtype=loss.dtype, device=loss.device)
    return torch.where(keep, loss, zero).sum(), torch.where(keep, nll, zero).sum()
