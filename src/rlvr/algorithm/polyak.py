"""Polyak (exponential moving average) update of the reference policy toward the policy:
ref <- (1 - alpha) * ref + alpha * policy, in place, over matching lists of tensors."""

from __future__ import annotations

import torch


@torch.no_grad()
def polyak_update_(targets: list[torch.Tensor], sources: list[torch.Tensor], alpha: float) -> None:
    if not 0.0 <= alpha <= 1.0:
        raise ValueError(f"alpha={alpha} must be in [0, 1]")
    if len(targets) != len(sources):
        raise ValueError(f"{len(targets)} reference tensors but {len(sources)} policy tensors")
    torch._foreach_lerp_(targets, [s.to(t.dtype) for t, s in zip(targets, sources)], alpha)
