"""Correction for the mismatch between the engine that sampled and the learner that trains.

The engine (vLLM, a bf16 copy, an older version of the weights when generation runs ahead) and
the learner assign different probabilities to the same tokens. The ratio
rho = exp(logp_old - logp_engine) reweights each token's policy-gradient term:
- `none`: truncated importance sampling (TIS): each token weighted by its rho clamped to
  [lower, upper];
- `token`: masked importance sampling (MIS): tokens whose rho falls outside the bounds are
  dropped from the policy-gradient term, the rest weighted by their rho;
- `sequence`: sequence-level MIS (Yao et al.; open-instruct's `rho_mask_sequence_level`): a
  sequence's rho is exp(mean of its tokens' log rho), the geometric mean; a sequence whose rho
  falls outside the bounds is dropped whole, the others weight every token by it. One
  surprising token no longer drops its sequence: only the sequence's overall drift counts.
Dropped tokens leave only the policy-gradient term; the KL term stays on them, as in
open-instruct (the penalty keeps the policy near the reference whatever sampled the token).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from rlvr.algorithm.sequences import sequence_mean_per_token

RHO_MASK_MODES = ("none", "token", "sequence")
LOG_RHO_CLAMP = 40.0


@dataclass(frozen=True)
class RhoCorrection:
    lower: float
    upper: float
    mask: str = "none"  # none | token | sequence


@dataclass
class RhoResult:
    weight_RL: torch.Tensor  # [R, L] detached weight of each kept token's policy-gradient term
    keep_RL: torch.Tensor  # [R, L] bool: response tokens whose policy-gradient term stays
    rho_RL: torch.Tensor  # [R, L] unclamped token rho (1 outside the response mask), for metrics


def rho_correction(old_logprobs_RL: torch.Tensor, engine_logprobs_RL: torch.Tensor,
                   response_mask_RL: torch.Tensor, sequence_ids_RL: torch.Tensor | None,
                   correction: RhoCorrection) -> RhoResult:
    if correction.mask not in RHO_MASK_MODES:
        raise ValueError(f"rho mask '{correction.mask}' is not one of {RHO_MASK_MODES}")
    log_rho_RL = (old_logprobs_RL - engine_logprobs_RL).detach()
    log_rho_RL = torch.where(response_mask_RL, log_rho_RL, torch.zeros_like(log_rho_RL))
    log_rho_RL = log_rho_RL.clamp(-LOG_RHO_CLAMP, LOG_RHO_CLAMP)
    rho_RL = torch.exp(log_rho_RL)
    if correction.mask == "sequence":
        if sequence_ids_RL is None:
            raise ValueError("sequence-level rho masking needs sequence ids")
        # Geometric mean of the sequence's token ratios, on every token of the sequence.
        seq_rho_RL = torch.exp(sequence_mean_per_token(log_rho_RL, sequence_ids_RL,
                                                       response_mask_RL))
        inside_RL = (seq_rho_RL >= correction.lower) & (seq_rho_RL <= correction.upper)
        return RhoResult(weight_RL=torch.where(response_mask_RL, seq_rho_RL,
                                               torch.ones_like(seq_rho_RL)),
                         keep_RL=response_mask_RL & inside_RL, rho_RL=rho_RL)
    keep_RL = response_mask_RL
    if correction.mask == "token":
        inside_RL = (rho_RL >= correction.lower) & (rho_RL <= correction.upper)
        keep_RL = response_mask_RL & inside_RL
    return RhoResult(weight_RL=rho_RL.clamp(correction.lower, correction.upper), keep_RL=keep_RL,
                     rho_RL=rho_RL)
