"""Group-relative advantages: each sample's reward compared with its group's.

`standard` is GRPO's (r - mean) / (std + eps); `centered` is Dr.GRPO's r - mean (no division,
which removes the bias toward groups with little spread). The std is the population std
(ddof=0), as open-instruct computes it.
"""

from __future__ import annotations

from typing import Callable

import torch

from rlvr.registry import Registry

AdvantageFn = Callable[[torch.Tensor, float], torch.Tensor]
ADVANTAGE_NORMALIZATIONS: Registry[AdvantageFn] = Registry("advantage normalization")
register_advantage_normalization = ADVANTAGE_NORMALIZATIONS.register


@register_advantage_normalization("standard")
def standard_advantages(rewards_NG: torch.Tensor, eps: float) -> torch.Tensor:
    mean_N1 = rewards_NG.mean(dim=1, keepdim=True)
    std_N1 = rewards_NG.std(dim=1, keepdim=True, correction=0)
    return (rewards_NG - mean_N1) / (std_N1 + eps)


@register_advantage_normalization("centered")
def centered_advantages(rewards_NG: torch.Tensor, eps: float) -> torch.Tensor:
    return rewards_NG - rewards_NG.mean(dim=1, keepdim=True)


def compute_group_advantages(rewards_NG: torch.Tensor, normalization: str,
                             eps: float = 1e-6) -> torch.Tensor:
    """[N, G] rewards of N groups of G samples -> [N, G] advantages."""
    return ADVANTAGE_NORMALIZATIONS.lookup(normalization)(rewards_NG.float(), eps)
