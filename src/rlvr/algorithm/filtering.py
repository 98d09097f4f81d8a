"""Zero-std group filtering: a group whose samples all scored the same carries no gradient
under group-relative advantages, so it only dilutes the batch (DAPO's dynamic sampling filter).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch


@dataclass
class FilterResult:
    keep_N: torch.Tensor  # [N] bool
    real_batch_size_ratio: float  # kept groups / all groups
    num_zero_std_groups: int
    num_solved_groups: int  # zero spread at a positive reward: every sample solved it
    num_unsolved_groups: int  # zero spread otherwise


def group_has_signal(rewards_NG: torch.Tensor, tol: float = 1e-8) -> torch.Tensor:
    """[N] bool: True where a group's rewards are not all equal."""
    spread_N = rewards_NG.max(dim=1).values - rewards_NG.min(dim=1).values
    return spread_N > tol


def filter_zero_std_groups(rewards_NG: torch.Tensor, enabled: bool) -> FilterResult:
    signal_N = group_has_signal(rewards_NG)
    flat_N = ~signal_N
    solved = int((flat_N & (rewards_NG[:, 0] > 0)).sum())
    num_zero = int(flat_N.sum())
    num_groups = max(int(rewards_NG.shape[0]), 1)
    keep_N = signal_N if enabled else torch.ones_like(signal_N)
    return FilterResult(keep_N=keep_N, real_batch_size_ratio=float(keep_N.sum()) / num_groups,
                        num_zero_std_groups=num_zero, num_solved_groups=solved,
                        num_unsolved_groups=num_zero - solved)
