"""KL estimators between the policy and the reference, per token, with d = logp - logp_ref.

0: d (k1, unbiased, can be negative); 1: d^2 / 2 (k2); 2: expm1(-d) + d (k3, Schulman's
low-variance unbiased estimator of KL(policy || ref)); 3: exp(d) * d (the ratio times d).
d is clamped to [-40, 40] so exp never overflows on tokens the reference finds absurd.
"""

from __future__ import annotations

from typing import Callable

import torch

KlFn = Callable[[torch.Tensor], torch.Tensor]
KL_ESTIMATORS: dict[int, KlFn] = {
    0: lambda d: d,
    1: lambda d: 0.5 * d.square(),
    2: lambda d: torch.expm1(-d) + d,
    3: lambda d: torch.exp(d) * d,
}
LOG_RATIO_CLAMP = 40.0


def _log_ratio(logprobs: torch.Tensor, ref_logprobs: torch.Tensor) -> torch.Tensor:
    return (logprobs - ref_logprobs).clamp(-LOG_RATIO_CLAMP, LOG_RATIO_CLAMP)


def kl_penalty(logprobs: torch.Tensor, ref_logprobs: torch.Tensor, estimator: int) -> torch.Tensor:
    if estimator not in KL_ESTIMATORS:
        raise ValueError(f"kl_estimator {estimator} is not one of {sorted(KL_ESTIMATORS)}")
    return KL_ESTIMATORS[estimator](_log_ratio(logprobs, ref_logprobs))


def all_kl_estimates(logprobs: torch.Tensor, ref_logprobs: torch.Tensor) -> dict[int, torch.Tensor]:
    d = _log_ratio(logprobs, ref_logprobs)
    return {k: fn(d) for k, fn in KL_ESTIMATORS.items()}
