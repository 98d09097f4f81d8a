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

from dataclasses import dataclass, field
from typing import Any, Callable, Mapping

import torch

from rlvr.algorithm.importance import RhoCorrection, RhoResult, rho_correction
from rlvr.algorithm.kl import all_kl_estimates
from rlvr.algorithm.sequences import sequence_lengths_per_token, sequence_mean_per_token
from rlvr.registry import Registry


@dataclass(frozen=True)
class LossParams:
    clip_lower: float
    clip_higher: float
    beta: float
    kl_estimator: int
    denominator: float  # what the summed token losses are divided by
    rho: RhoCorrection | None = None  # engine-mismatch correction, off when None
    # A loss's own parameters (`algorithm.loss_args`), for a variant that needs more than the
    # above: a plugin's loss reads `params.args["tau"]`, with no field added anywhere else.
    args: Mapping[str, Any] = field(default_factory=dict)


@dataclass
class LossInputs:
    new_logprobs_RL: torch.Tensor  # [R, L] policy logprobs, with grad
    old_logprobs_RL: torch.Tensor  # [R, L] logprobs of the policy that sampled (detached)
    advantages_RL: torch.Tensor  # [R, L]
    response_mask_RL: torch.Tensor  # [R, L] bool: tokens that count
    ref_logprobs_RL: torch.Tensor | None = None  # [R, L] reference logprobs, when loaded
    sequence_ids_RL: torch.Tensor | None = None  # [R, L] sample index per token (sequence losses)
    engine_logprobs_RL: torch.Tensor | None = None  # [R, L] the sampling engine's logprobs


@dataclass
class TokenTerms:
    """What a loss variant contributes per token, before masking and reduction."""

    pg_loss_RL: torch.Tensor  # [R, L]
    ratio_RL: torch.Tensor  # [R, L] detached importance ratio new/old
    clipped_lower_RL: torch.Tensor  # [R, L] bool: the lower clip changed this token's objective
    clipped_upper_RL: torch.Tensor  # [R, L] bool: the upper clip did
    weight_RL: torch.Tensor | None = None  # [R, L] per-token weight in the sum (default 1)


@dataclass
class LossOutputs:
    loss: torch.Tensor  # scalar with grad
    sums: dict[str, float]  # detached sums over response tokens


PolicyLossFn = Callable[[LossInputs, LossParams], TokenTerms]
_UNITS = ("token", "sequence")  # what a denominator can count


@dataclass(frozen=True)
class RegisteredLoss:
    """A `POLICY_LOSSES` entry: a loss's per-token terms and what its denominator counts:
    response tokens, or sequences (per-sequence means)."""

    terms: PolicyLossFn
    per: str = "token"


POLICY_LOSSES: Registry[RegisteredLoss] = Registry("loss_fn")


def register_policy_loss(name: str, per: str = "token") -> Callable[[PolicyLossFn], PolicyLossFn]:
    """Decorator: make a token-terms function the loss `name`, its denominator counting `per`."""
    if per not in _UNITS:
        raise ValueError(f"loss_fn '{name}': per={per!r} is not one of {_UNITS}")

    def register(terms: PolicyLossFn) -> PolicyLossFn:
        POLICY_LOSSES.add(name, RegisteredLoss(terms, per), defined_by=terms)
        return terms

    return register


def normalization_unit(name: str) -> str:
    """"token" or "sequence": what the caller's global count for `denominator` must count."""
    return POLICY_LOSSES.lookup(name).per


def _log_ratio(inputs: LossInputs) -> torch.Tensor:
    # Masked positions may hold anything (even inf): zero them before exp so nothing leaks.
    diff_RL = inputs.new_logprobs_RL - inputs.old_logprobs_RL
    return torch.where(inputs.response_mask_RL, diff_RL, torch.zeros_like(diff_RL))


def _clipped_surrogate(ratio_RL: torch.Tensor, adv_RL: torch.Tensor,
                       params: LossParams) -> TokenTerms:
    """-min(r A, clip(r, 1 - clip_lower, 1 + clip_higher) A), with which side clipped."""
    clipped_ratio_RL = ratio_RL.clamp(1.0 - params.clip_lower, 1.0 + params.clip_higher)
    unclipped_RL = -adv_RL * ratio_RL
    clipped_RL = -adv_RL * clipped_ratio_RL  # [R, L]
    pg_RL = torch.maximum(unclipped_RL, clipped_RL)  # = -min(r A, clip(r) A)
    clip_active_RL = clipped_RL > unclipped_RL
    ratio_d = ratio_RL.detach()
    return TokenTerms(pg_loss_RL=pg_RL, ratio_RL=ratio_d,
                      clipped_lower_RL=clip_active_RL & (ratio_d < 1.0),
                      clipped_upper_RL=clip_active_RL & (ratio_d > 1.0))


@register_policy_loss("dapo")
def dapo_loss(inputs: LossInputs, params: LossParams) -> TokenTerms:
    """PPO's clipped surrogate with DAPO's asymmetric clip (clip-higher), token level."""
    return _clipped_surrogate(torch.exp(_log_ratio(inputs)), inputs.advantages_RL, params)


def _sequence_ids(inputs: LossInputs) -> torch.Tensor:
    if inputs.sequence_ids_RL is None:
        raise ValueError("a per-sequence loss needs LossInputs.sequence_ids_RL")
    return inputs.sequence_ids_RL


@register_policy_loss("grpo", per="sequence")
def grpo_loss(inputs: LossInputs, params: LossParams) -> TokenTerms:
    """The original GRPO reduction: the clipped surrogate averaged over each sequence's tokens,
    then over sequences (the caller's denominator counts sequences)."""
    terms = _clipped_surrogate(torch.exp(_log_ratio(inputs)), inputs.advantages_RL, params)
    lengths_RL = sequence_lengths_per_token(_sequence_ids(inputs), inputs.response_mask_RL)
    terms.weight_RL = 1.0 / lengths_RL
    return terms


@register_policy_loss("gspo", per="sequence")
def gspo_loss(inputs: LossInputs, params: LossParams) -> TokenTerms:
    """GSPO (Qwen): one importance ratio per sequence, the geometric mean of its token ratios,
    clipped per sequence. Token form: s_t = sg(s) * exp(logp_t - sg(logp_t)) has the value of s
    and the gradient s * grad(logp_t), so weighting tokens by 1/|o| gives the sequence gradient.
    Its paper clips far tighter than PPO (clip_lower 3e-4, clip_higher 4e-4)."""
    mask_RL = inputs.response_mask_RL
    ids_RL = _sequence_ids(inputs)
    log_s_RL = sequence_mean_per_token(_log_ratio(inputs), ids_RL, mask_RL)
    new_RL = inputs.new_logprobs_RL
    token_log_ratio_RL = log_s_RL.detach() + new_RL - new_RL.detach()
    token_log_ratio_RL = torch.where(mask_RL, token_log_ratio_RL, torch.zeros_like(new_RL))
    terms = _clipped_surrogate(torch.exp(token_log_ratio_RL), inputs.advantages_RL, params)
    terms.weight_RL = 1.0 / sequence_lengths_per_token(ids_RL, mask_RL)
    return terms


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
    loss_terms = POLICY_LOSSES.lookup(name).terms
    if params.beta > 0 and inputs.ref_logprobs_RL is None:
        raise ValueError("beta > 0 needs reference logprobs")
    terms = loss_terms(inputs, params)
    zero_RL = torch.zeros_like(terms.pg_loss_RL)
    mask_RL = inputs.response_mask_RL  # every response token: the KL term and the loss's mask
    keep_RL = mask_RL  # tokens whose policy-gradient term counts (masked IS may drop some)
    pg_RL = terms.pg_loss_RL
    sums: dict[str, float] = {"num_response_tokens": float(mask_RL.sum())}
    if params.rho is not None:
        if inputs.engine_logprobs_RL is None:
            raise ValueError("rho correction needs the engine's logprobs")
        rho = rho_correction(inputs.old_logprobs_RL, inputs.engine_logprobs_RL, mask_RL,
                             inputs.sequence_ids_RL, params.rho)
        pg_RL = pg_RL * rho.weight_RL
        keep_RL = rho.keep_RL
        sums.update(_rho_sums(rho, mask_RL))
    total_RL = torch.where(keep_RL, pg_RL, zero_RL)
    if inputs.ref_logprobs_RL is not None:
        # With grad: estimator 3 weights d by the ratio to the sampling policy, and its
        # gradient flows through both (open-instruct).
        ratio_RL = torch.exp(_log_ratio(inputs))
        kls = all_kl_estimates(inputs.new_logprobs_RL, inputs.ref_logprobs_RL, ratio_RL)
        for k, kl_RL in kls.items():
            sums[f"kl{k}_sum"] = float(torch.where(mask_RL, kl_RL.detach(), zero_RL).sum())
        if params.beta > 0:
            total_RL = total_RL + params.beta * kls[params.kl_estimator]
            sums["kl_loss_sum"] = params.beta * sums[f"kl{params.kl_estimator}_sum"]
    if terms.weight_RL is not None:
        total_RL = total_RL * terms.weight_RL
    loss = torch.where(mask_RL, total_RL, zero_RL).sum() / params.denominator
    # Policy metrics average over the tokens whose policy term was summed (`num_tokens`).
    ratio_RL = torch.where(keep_RL, terms.ratio_RL, zero_RL)
    sums.update({
        # The policy term as optimised: after the rho weight (before it, the metric was not
        # the loss the step took the gradient of).
        "policy_loss_sum": float(torch.where(keep_RL, pg_RL.detach(), zero_RL).sum()),
        "clipped_lower_count": float((terms.clipped_lower_RL & keep_RL).sum()),
        "clipped_upper_count": float((terms.clipped_upper_RL & keep_RL).sum()),
        "ratio_sum": float(ratio_RL.sum()),
        "ratio_sq_sum": float(ratio_RL.square().sum()),
        "num_tokens": float(keep_RL.sum()),
    })
    return LossOutputs(loss=loss, sums=sums)


def _rho_sums(rho: RhoResult, mask_RL: torch.Tensor) -> dict[str, float]:
    values = rho.rho_RL[mask_RL]
    if values.numel() == 0:
        return {}
    return {"rho_sum": float(values.sum()), "rho_max": float(values.max()),
            "rho_min": float(values.min()),
            "rho_masked_count": float((mask_RL & ~rho.keep_RL).sum())}


def summarize_loss_metrics(sums: dict[str, float]) -> dict[str, float]:
    """Token-weighted averages from summed loss metrics (of one or many micro-batches or ranks).

    Each average divides by the tokens its sum ran over: policy terms (loss, ratio, clip
    fractions) by the tokens that kept their policy-gradient term (`num_tokens`), the KL and
    rho figures by every response token (`num_response_tokens`). With masked importance
    sampling the two differ; dividing a kept-token sum by all tokens would dilute it.
    """
    kept = max(sums.get("num_tokens", 0.0), 1.0)
    every = max(sums.get("num_response_tokens", 0.0), 1.0)
    ratio_mean = sums.get("ratio_sum", 0.0) / kept
    policy = sums.get("policy_loss_sum", 0.0) / kept
    kl_loss = sums.get("kl_loss_sum", 0.0) / every
    lower = sums.get("clipped_lower_count", 0.0) / kept
    upper = sums.get("clipped_upper_count", 0.0) / kept
    metrics = {
        "loss/policy_avg": policy,
        "loss/kl_avg": kl_loss,
        "loss/total_avg": policy + kl_loss,
        "policy/clipfrac_avg": lower + upper,
        "policy/clipfrac_lower": lower,
        "policy/clipfrac_upper": upper,
        "val/ratio": ratio_mean,
        "val/ratio_var": max(sums.get("ratio_sq_sum", 0.0) / kept - ratio_mean ** 2, 0.0),
    }
    for k in range(4):
        if f"kl{k}_sum" in sums:
            metrics[f"objective/kl{k}_avg"] = sums[f"kl{k}_sum"] / every
    if "rho_sum" in sums:
        metrics.update({"val/rho_mean": sums["rho_sum"] / every, "val/rho_max": sums["rho_max"],
                        "val/rho_min": sums["rho_min"],
                        "val/rho_masked_frac": sums["rho_masked_count"] / every})
    return metrics


@dataclass(frozen=True)
class PolicyLoss:
    """A registered loss bound to its parameters: a picklable `LossInputs -> LossOutputs`, so the
    same object works in this process and can be sent to learner processes."""

    name: str
    params: LossParams

    def __call__(self, inputs: LossInputs) -> LossOutputs:
        return compute_policy_loss(self.name, inputs, self.params)
