"""Policy-gradient losses of the GRPO family, registered by name, plus the shared reduction.

A registered loss maps token tensors to per-token terms (`TokenTerms`); `compute_policy_loss`
adds the KL penalty, masks, and divides the summed token losses by `params.denominator`. The
denominator is a number handed in by the caller: the whole batch's response-token count (so a
batch cut into micro-batches or ranks sums to the same loss and gradient) or a constant
(Dr.GRPO). Nothing here reads a process group, a model or a config.

Metrics come back as detached sums over tokens, so callers add micro-batch outputs and divide by
the global token count once (token-weighted averages, as open-instruct reports them).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

import torch

from rlvr.algorithm.kl import all_kl_estimates


@dataclass(frozen=True)
class LossParams:
    clip_lower: float
    clip_higher: float
    beta: float
    kl_estimator: int
    denominator: float  # what the summed token losses are divided by


@dataclass
class LossInputs:
    new_logprobs_RL: torch.Tensor  # [R, L] policy logprobs, with grad
    old_logprobs_RL: torch.Tensor  # [R, L] logprobs of the policy that sampled (detached)
    advantages_RL: torch.Tensor  # [R, L]
    response_mask_RL: torch.Tensor  # [R, L] bool: tokens that count
    ref_logprobs_RL: torch.Tensor | None = None  # [R, L] reference logprobs, when loaded


@dataclass
class TokenTerms:
    """What a loss variant contributes per token, before masking and reduction."""

    pg_loss_RL: torch.Tensor  # [R, L]
    ratio_RL: torch.Tensor  # [R, L] detached importance ratio new/old
    clipped_lower_RL: torch.Tensor  # [R, L] bool: the lower clip changed this token's objective
    clipped_upper_RL: torch.Tensor  # [R, L] bool: the upper clip did


@dataclass
class LossOutputs:
    loss: torch.Tensor  # scalar with grad
    sums: dict[str, float]  # detached sums over response tokens

    def metric_sums(self) -> dict[str, float]:
        return self.sums


PolicyLossFn = Callable[[LossInputs, LossParams], TokenTerms]
POLICY_LOSSES: dict[str, PolicyLossFn] = {}


def register_policy_loss(name: str) -> Callable[[PolicyLossFn], PolicyLossFn]:
    def wrap(fn: PolicyLossFn) -> PolicyLossFn:
        POLICY_LOSSES[name] = fn
        return fn

    return wrap


def _log_ratio(inputs: LossInputs) -> torch.Tensor:
    # Masked positions may hold anything (even inf): zero them before exp so nothing leaks.
    diff_RL = inputs.new_logprobs_RL - inputs.old_logprobs_RL
    return torch.where(inputs.response_mask_RL, diff_RL, torch.zeros_like(diff_RL))


@register_policy_loss("dapo")
def dapo_loss(inputs: LossInputs, params: LossParams) -> TokenTerms:
    """PPO's clipped surrogate with DAPO's asymmetric clip (clip-higher), token level."""
    ratio_RL = torch.exp(_log_ratio(inputs))
    adv_RL = inputs.advantages_RL
    clipped_ratio_RL = ratio_RL.clamp(1.0 - params.clip_lower, 1.0 + params.clip_higher)
    unclipped_RL = -adv_RL * ratio_RL
    clipped_RL = -adv_RL * clipped_ratio_RL
    pg_RL = torch.maximum(unclipped_RL, clipped_RL)  # = -min(r A, clip(r) A)
    clip_active_RL = clipped_RL > unclipped_RL
    ratio_d = ratio_RL.detach()
    return TokenTerms(pg_loss_RL=pg_RL, ratio_RL=ratio_d,
                      clipped_lower_RL=clip_active_RL & (ratio_d < 1.0),
                      clipped_upper_RL=clip_active_RL & (ratio_d > 1.0))


@register_policy_loss("cispo")
def cispo_loss(inputs: LossInputs, params: LossParams) -> TokenTerms:
    """MiniMax-M1's CISPO: a clipped, detached importance weight times the token's logprob.

    Only the upper bound clips, as in the paper (its lower bound is set out of reach), so
    tokens with small ratios keep their gradient instead of being dropped by PPO's min.
    """
    ratio_RL = torch.exp(_log_ratio(inputs)).detach()
    weight_RL = ratio_RL.clamp(max=1.0 + params.clip_higher)
    pg_RL = -weight_RL * inputs.advantages_RL * inputs.new_logprobs_RL
    return TokenTerms(pg_loss_RL=pg_RL, ratio_RL=ratio_RL,
                      clipped_lower_RL=torch.zeros_like(ratio_RL, dtype=torch.bool),
                      clipped_upper_RL=ratio_RL > 1.0 + params.clip_higher)


def compute_policy_loss(name: str, inputs: LossInputs, params: LossParams) -> LossOutputs:
    if name not in POLICY_LOSSES:
        raise ValueError(f"loss_fn '{name}' is not one of {sorted(POLICY_LOSSES)}")
    if params.beta > 0 and inputs.ref_logprobs_RL is None:
        raise ValueError("beta > 0 needs reference logprobs")
    mask_RL = inputs.response_mask_RL
    terms = POLICY_LOSSES[name](inputs, params)
    zero_RL = torch.zeros_like(terms.pg_loss_RL)
    total_RL = terms.pg_loss_RL
    sums: dict[str, float] = {}
    if inputs.ref_logprobs_RL is not None:
        kls = all_kl_estimates(inputs.new_logprobs_RL, inputs.ref_logprobs_RL)
        for k, kl_RL in kls.items():
            sums[f"kl{k}_sum"] = float(torch.where(mask_RL, kl_RL.detach(), zero_RL).sum())
        if params.beta > 0:
            total_RL = total_RL + params.beta * kls[params.kl_estimator]
            sums["kl_loss_sum"] = params.beta * sums[f"kl{params.kl_estimator}_sum"]
    loss = torch.where(mask_RL, total_RL, zero_RL).sum() / params.denominator
    ratio_RL = torch.where(mask_RL, terms.ratio_RL, zero_RL)
    sums.update({
        "policy_loss_sum": float(torch.where(mask_RL, terms.pg_loss_RL.detach(), zero_RL).sum()),
        "clipped_lower_count": float((terms.clipped_lower_RL & mask_RL).sum()),
        "clipped_upper_count": float((terms.clipped_upper_RL & mask_RL).sum()),
        "ratio_sum": float(ratio_RL.sum()),
        "ratio_sq_sum": float(ratio_RL.square().sum()),
        "num_tokens": float(mask_RL.sum()),
    })
    return LossOutputs(loss=loss, sums=sums)


def summarize_loss_metrics(sums: dict[str, float], num_tokens: float) -> dict[str, float]:
    """Token-weighted averages from summed loss metrics (of one or many micro-batches)."""
    n = max(num_tokens, 1.0)
    ratio_mean = sums.get("ratio_sum", 0.0) / n
    policy = sums.get("policy_loss_sum", 0.0) / n
    kl_loss = sums.get("kl_loss_sum", 0.0) / n
    lower, upper = sums.get("clipped_lower_count", 0.0) / n, sums.get("clipped_upper_count", 0.0) / n
    metrics = {
        "loss/policy_avg": policy,
        "loss/kl_avg": kl_loss,
        "loss/total_avg": policy + kl_loss,
        "policy/clipfrac_avg": lower + upper,
        "policy/clipfrac_lower": lower,
        "policy/clipfrac_upper": upper,
        "val/ratio": ratio_mean,
        "val/ratio_var": max(sums.get("ratio_sq_sum", 0.0) / n - ratio_mean ** 2, 0.0),
    }
    for k in range(4):
        if f"kl{k}_sum" in sums:
            metrics[f"objective/kl{k}_avg"] = sums[f"kl{k}_sum"] / n
    return metrics
