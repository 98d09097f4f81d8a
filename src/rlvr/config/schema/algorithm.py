"""What is learned from the samples: `algorithm` (losses, advantages, KL, packing) and `optimizer`.
One section per dataclass; each field's comment, range and choices are its facts
(`rlvr.config.fields`)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Optional

from rlvr.config.fields import (ANY_FINITE, AT_LEAST_ONE, FRACTION, NON_NEGATIVE, POSITIVE,
                                UNIT_OPEN_HIGH, UNIT_OPEN_LOW, Range, choice, ranged)


@dataclass
class AlgorithmConfig:
    # A registered policy loss: a built-in name, or 'package.module:name' (docs/plugins.md).
    loss_fn: str = "dapo"
    # The loss's own parameters, for a loss that takes more than the fields below: passed to
    # it as LossParams.args (e.g. {tau: 0.5} for a plugin's loss that reads args["tau"]).
    loss_args: dict[str, Any] = field(default_factory=dict)
    advantage_normalization_type: str = "standard"  # standard | centered
    beta: float = ranged(0.0, NON_NEGATIVE)  # KL coefficient; 0 loads no reference model
    # d = logp - logp_ref; 0: d, 1: d^2/2, 2: expm1(-d)+d, 3: ratio*d with ratio =
    # exp(logp - logp_old), the importance weight from the sampling policy (open-instruct).
    # As a loss: 1 and 3 follow KL(policy || ref), 2 the reverse KL (GRPO), 0 nothing (beta > 0
    # refuses it)
    kl_estimator: int = ranged(2, Range(low=0, high=3))
    # Load a frozen reference policy. null: only when beta > 0. true with beta 0 loads it to log
    # the KL metrics without penalising (open-instruct's behaviour); false needs beta 0.
    load_ref_policy: Optional[bool] = None
    # steps between Polyak updates of the reference
    ref_policy_update_freq: Optional[int] = ranged(None, AT_LEAST_ONE)
    alpha: float = ranged(0.6, FRACTION)  # Polyak rate: ref <- (1 - alpha) * ref + alpha * policy
    # Reweight each token's policy-gradient term by rho = exp(old - engine logprob), clamped to
    # [rho_clamp_lower, rho_clamp_upper]. null: on when generation runs ahead of training
    # (rollout.async_steps > 0, where the engine's weights are stale) and top_p = 1.
    rho_correction: Optional[bool] = None
    rho_clamp_lower: float = ranged(0.0, UNIT_OPEN_HIGH)  # in [0, 1)
    # > 1 (open-instruct's default)
    rho_clamp_upper: float = ranged(
        2.0, Range(low=1, low_open=True, why="rho is 1 when the engine and the learner agree"))
    # none: clamp (truncated IS); token: drop tokens out of bounds; sequence: drop sequences
    # whose geometric-mean rho is out of bounds, weight the rest by it (masked IS; open-
    # instruct's rho_mask_sequence_level with mask bounds = clamp bounds); sequence_truncate:
    # weight every token by its sequence's clamped geometric-mean rho, drop none (open-
    # instruct's rho_mask_sequence_level with its mask bounds off); sequence_token: drop
    # sequences as `sequence` does, weight each kept token by its own clamped rho. Default none.
    rho_mask: str = choice(
        "none", {"none", "token", "sequence", "sequence_truncate", "sequence_token"})
    clip_lower: float = ranged(0.2, UNIT_OPEN_HIGH)  # the ratio is clipped below at 1 - clip_lower
    # and above at 1 + clip_higher (DAPO's clip-higher: > clip_lower)
    clip_higher: float = ranged(0.2, NON_NEGATIVE)
    filter_zero_std_samples: bool = True  # drop groups whose rewards are all equal (no signal)
    # Stop the run (exit 6, its state saved) after this many steps in a row in which no sample
    # had a non-zero advantage: every group's rewards equal, nothing learnt. 0: never stop
    max_steps_without_update: int = ranged(10, NON_NEGATIVE)
    active_sampling: bool = False  # draw more prompts until the batch has enough non-flat groups
    # bound on generation rounds per step
    active_sampling_max_rounds: int = ranged(4, AT_LEAST_ONE)
    # retire a prompt whose mean reward over the most a sample earns is at least this
    # (open-instruct)
    no_resampling_pass_rate: Optional[float] = ranged(None, UNIT_OPEN_LOW)
    # None: total response tokens; a number: Dr.GRPO
    loss_denominator: Optional[float] = ranged(None, POSITIVE)
    non_stop_penalty: bool = False  # give truncated completions non_stop_penalty_value
    # reward of a truncated completion when penalised
    non_stop_penalty_value: float = ranged(0.0, ANY_FINITE)
    # DAPO soft overlong penalty: tokens before the limit; 0 disables
    overlong_buffer: int = ranged(0, NON_NEGATIVE)
    overlong_penalty_factor: float = ranged(1.0, NON_NEGATIVE)  # the penalty at the length limit
    # Truncated samples (hit response_length) train nothing. By default they are dropped before
    # advantages, so the group's baseline is its finished samples' (open-instruct);
    # truncated_in_baseline keeps them in the baseline, with no gradient of their own.
    mask_truncated_completions: bool = False
    # Keep truncated samples in their group's baseline, with no gradient of their own; needs
    # mask_truncated_completions
    truncated_in_baseline: bool = False
    # in_order (greedy) | first_fit_decreasing
    packing: str = choice("in_order", {"in_order", "first_fit_decreasing"})
    # Pack a group's prompt once with its responses after it, each seeing the prompt but not its
    # siblings (fewer tokens), or each sequence whole (false), as varlen attention needs. null:
    # shared where model.attn_implementation can confine them (attention.packed_layout).
    share_prompts: Optional[bool] = None
    # Cut each mini-batch into micro-batches of at most this many tokens (verl's dynamic batch
    # size), so long reasoning traces fit in memory. null: on GPUs, the most whole rows that
    # fit the learner's memory (every rank's), measured before the first update
    # (rlvr.learner.memory_plan); on CPU gradient_accumulation_steps parts only. The loss
    # is normalised over the whole mini-batch, so the gradient does not depend on the cut.
    max_tokens_per_micro_batch: Optional[int] = ranged(None, AT_LEAST_ONE)
    # Optimizer steps per batch, one per mini-batch (open-instruct's and PPO's meaning): the
    # batch's packed rows are cut into this many contiguous groups, each with its own loss
    # denominator, trained one after the other; the LR schedule counts every step. (Before,
    # this field meant gradient accumulation inside ONE step: that is now the next field.)
    num_mini_batches: int = ranged(1, AT_LEAST_ONE)
    # Micro-batches (forward/backward passes) each mini-batch's gradient accumulates over
    # before its optimizer step; the gradient does not depend on it. null: 1, but a config
    # with num_mini_batches > 1 must set it (the old meaning of num_mini_batches is refused).
    gradient_accumulation_steps: Optional[int] = ranged(None, AT_LEAST_ONE)
    # passes over the batch, each num_mini_batches optimizer steps
    num_epochs: int = ranged(1, AT_LEAST_ONE)
    pack_length: int = ranged(1024, AT_LEAST_ONE)  # tokens of one packed row (prompt + responses)


@dataclass
class OptimizerConfig:
    learning_rate: float = ranged(1e-6, POSITIVE)  # AdamW's peak learning rate
    # linear | cosine | cosine_with_restarts | polynomial | constant | constant_with_warmup
    # (transformers' schedulers of those names)
    lr_scheduler_type: str = "constant"
    warm_up_steps: int = ranged(0, NON_NEGATIVE)  # optimizer steps of linear warm-up
    # Warm-up as a fraction of the run's optimizer steps (rounded up, as transformers'
    # TrainingArguments.warmup_ratio); used when warm_up_steps is 0, refused beside it.
    warmup_ratio: float = ranged(0.0, UNIT_OPEN_HIGH)
    # cosine_with_restarts: hard restarts over the run
    lr_num_cycles: int = ranged(1, AT_LEAST_ONE)
    # polynomial: the rate it decays to, below learning_rate
    lr_end: float = ranged(1e-7, NON_NEGATIVE)
    lr_power: float = ranged(1.0, POSITIVE)  # polynomial: the decay's power (1: linear)
    # AdamW's decoupled weight decay (not on biases and norm weights)
    weight_decay: float = ranged(0.0, NON_NEGATIVE)
    max_grad_norm: float = ranged(1.0, POSITIVE)  # the gradient's global norm is clipped to this
    # non-finite gradients this many steps in a row: abort
    max_consecutive_skipped_steps: int = ranged(3, AT_LEAST_ONE)
    adam_beta1: float = ranged(0.9, UNIT_OPEN_HIGH)  # AdamW's first-moment decay
    adam_beta2: float = ranged(0.999, UNIT_OPEN_HIGH)  # AdamW's second-moment decay
    adam_eps: float = ranged(1e-8, POSITIVE)  # AdamW's epsilon
