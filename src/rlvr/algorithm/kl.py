"""KL estimators between the policy and the reference, per token, with d = logp - logp_ref.

Every estimator is evaluated on tokens sampled from the old policy (the one that generated the
batch), and estimates KL(policy || ref) = E_policy[d]:
- 0: d (k1: unbiased, can be negative);
- 1: d^2 / 2 (k2: biased, low variance);
- 2: expm1(-d) + d (k3 in Schulman's notes: unbiased and never negative);
- 3: ratio * d with ratio = exp(logp - logp_old), the importance weight from the sampling policy
  to the current one (open-instruct's fourth estimator). At the first step of a batch the ratio
  is 1 and this equals estimator 0; it stays unbiased as the policy moves within the batch's
  epochs. The ratio keeps its gradient, as open-instruct's does: at ratio 1 the gradient of
  ratio * d is (d + 1) grad logp, whose expectation is the gradient of the KL.
d is clamped to [-40, 40] so exp never overflows on tokens the reference finds absurd.

As a loss (`beta > 0`) what counts is the estimator's gradient, in expectation over the sampled
tokens, not its value (with ratio = 1, p the policy and q the reference):
- 0: grad d = grad logp, which averages to 0: no penalty at all (refused with `beta > 0`);
- 1: d grad logp, whose expectation is grad KL(policy || ref);
- 2: (1 - q/p) grad logp, whose expectation is grad KL(ref || policy): the reverse KL, as in
  GRPO (DeepSeekMath), verl's `low_var_kl` and TRL;
- 3: (d + 1) grad logp, expectation grad KL(policy || ref).
`tests/algorithm/test_kl.py` checks each on an exact distribution.
"""

from __future__ import annotations

from typing import Callable

import torch

# (d, ratio) -> per-token estimate; only estimator 3 reads the ratio.
KlFn = Callable[[torch.Tensor, torch.Tensor], torch.Tensor]
KL_ESTIMATORS: dict[int, KlFn] = {
    0: lambda d, ratio: d,
    1: lambda d, ratio: 0.5 * d.square(),
    2: lambda d, ratio: torch.expm1(-d) + d,
    3: lambda d, ratio: ratio * d,
}
LOG_RATIO_CLAMP = 40.0


def _log_ratio(logprobs: torch.Tensor, ref_logprobs: torch.Tensor) -> torch.Tensor:
    return (logprobs - ref_logprobs).clamp(-LOG_RATIO_CLAMP, LOG_RATIO_CLAMP)


def kl_penalty(logprobs: torch.Tensor, ref_logprobs: torch.Tensor, ratio: torch.Tensor,
               estimator: int) -> torch.Tensor:
    """Estimator `estimator` per token; `ratio` = exp(logp - logp_old) of the same tokens."""
    if estimator not in KL_ESTIMATORS:
        raise ValueError(f"kl_estimator {estimator} is not one of {sorted(KL_ESTIMATORS)}")
    return KL_ESTIMATORS[estimator](_log_ratio(logprobs, ref_logprobs), ratio)


def all_kl_estimates(logprobs: torch.Tensor, ref_logprobs: torch.Tensor,
                     ratio: torch.Tensor) -> dict[int, torch.Tensor]:
    d = _log_ratio(logprobs, ref_logprobs)
    return {k: fn(d, ratio) for k, fn in KL_ESTIMATORS.items()}
