"""Correction for the mismatch between the engine that sampled and the learner that trains.

The engine (vLLM, a bf16 copy, an older version of the weights) and the learner assign slightly
different probabilities to the same tokens. The ratio rho = exp(logp_old - logp_engine) reweights
each token's policy-gradient term (truncated importance sampling: rho clamped to
[lower, upper]); optionally, tokens or whole sequences whose rho falls outside the bounds are
dropped from the loss (masked importance sampling), since such samples are off-policy enough
that their gradient is more noise than signal.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

RHO_MASK_MODES = ("none", "token", "sequence")
LOG_RHO_CLAMP = 40.0


@dataclass(frozen=True)
class RhoCorrection:
    lower: float
    upper: float
    mask: str = "none"  # none | token | sequence


@dataclass
class RhoResult:
    weight_RL: torch.Tensor  # [R, L] clamped rho, detached; 1 outside the response mask
    keep_RL: torch.Tensor  # [R, L] bool: response tokens that stay in the loss
    rho_RL: torch.Tensor  # [R, L] unclamped rho (1 outside the response mask), for metrics


def rho_correction(old_logprobs_RL: torch.Tensor, engine_logprobs_RL: torch.Tensor,
                   response_mask_RL: torch.Tensor, sequence_ids_RL: torch.Tensor | None,
                   correction: RhoCorrection) -> RhoResult:
    if correction.mask not in RHO_MASK_MODES:
        raise ValueError(f"rho mask '{correction.mask}' is not one of {RHO_MASK_MODES}")
    log_rho_RL = (old_logprobs_RL - engine_logprobs_RL).detach()
    log_rho_RL = torch.where(response_mask_RL, log_rho_RL, torch.zeros_like(log_rho_RL))
    rho_RL = torch.exp(log_rho_RL.clamp(-LOG_RHO_CLAMP, LOG_RHO_CLAMP))
    outside_RL = response_mask_RL & ((rho_RL < correction.lower) | (rho_RL > correction.upper))
    keep_RL = response_mask_RL
    if correction.mask == "token":
        keep_RL = response_mask_RL & ~outside_RL
    elif correction.mask == "sequence":
        if sequence_ids_RL is None:
            raise ValueError("sequence-level rho masking needs sequence ids")
        bad_ids = sequence_ids_RL[outside_RL].unique()
        keep_RL = response_mask_RL & ~torch.isin(sequence_ids_RL, bad_ids)
    return RhoResult(weight_RL=rho_RL.clamp(correction.lower, correction.upper), keep_RL=keep_RL,
                     rho_RL=rho_RL)
