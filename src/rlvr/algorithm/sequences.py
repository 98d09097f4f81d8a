"""Per-sequence reductions over packed token tensors, for losses defined per sequence.

Tokens carry the index of the sample they belong to; these helpers broadcast a sequence-level
quantity (its response length, the mean of a value over its tokens) back to every token.
"""

from __future__ import annotations

import torch


def _compact_ids(sequence_ids_RL: torch.Tensor, mask_RL: torch.Tensor) -> tuple[torch.Tensor, int]:
    """Dense ids 0..S-1 for the masked tokens' sequences (flattened in row-major order)."""
    ids_N, dense_N = torch.unique(sequence_ids_RL[mask_RL], return_inverse=True)
    return dense_N, int(ids_N.numel())


def sequence_lengths_per_token(sequence_ids_RL: torch.Tensor, mask_RL: torch.Tensor) -> torch.Tensor:
    """[R, L] float: each masked token's sequence response length; 1 elsewhere (never 0)."""
    dense_N, num = _compact_ids(sequence_ids_RL, mask_RL)
    device = mask_RL.device
    counts_S = torch.zeros(num, device=device).index_add_(
        0, dense_N, torch.ones(len(dense_N), device=device))
    out_RL = torch.ones(mask_RL.shape, device=device)
    return out_RL.masked_scatter(mask_RL, counts_S[dense_N])


def sequence_mean_per_token(values_RL: torch.Tensor, sequence_ids_RL: torch.Tensor,
                            mask_RL: torch.Tensor) -> torch.Tensor:
    """[R, L]: each masked token gets the mean of `values` over its sequence's masked tokens;
    0 elsewhere. Differentiable with respect to `values`."""
    dense_N, num = _compact_ids(sequence_ids_RL, mask_RL)
    vals_N = values_RL[mask_RL]
    sums_S = vals_N.new_zeros(num).index_add(0, dense_N, vals_N)
    counts_S = vals_N.new_zeros(num).index_add_(0, dense_N, torch.ones_like(vals_N))
    means_N = (sums_S / counts_S)[dense_N]
    return torch.zeros_like(values_RL).masked_scatter(mask_RL, means_N)
