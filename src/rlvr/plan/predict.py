"""The prediction's arithmetic: from what the calibration measured (`Calibration`) and the
config's step shape (`RunShape`) to a step's tokens, seconds and peak memory (`Prediction`).
Pure functions of numbers; every figure is a mean over steps, except memory, which is the
peak of the largest step the run is likely to see (`likely_most_kept`).

Not here: measuring (`calibrate`). The rows a step packs into come from the run's own packer
(`rlvr.algorithm.packing`), fed sequences of the predicted lengths.
"""

from __future__ import annotations

import math

from rlvr.algorithm.packing import (PACKING_STRATEGIES, SequenceToPack, group_into_units,
                                    plan_micro_batches)
from rlvr.plan.records import Calibration, Prediction, RolloutCalibration, RunShape

# A no-grad forward pass (the old logprobs of mini-batches after the first) costs about a third
# of a forward and backward (backward is about twice the forward).
FORWARD_SHARE = 1 / 3


def response_tokens_mean(rollout: RolloutCalibration, response_length: int) -> float:
    """Mean tokens of a completion: a finished one's length as seen, a cut one's the whole
    `response_length` (an upper bound: it might have stopped before)."""
    n = len(rollout.finished_lengths) + rollout.num_truncated
    if n == 0:
        return float(response_length)
    return (sum(rollout.finished_lengths) + rollout.num_truncated * response_length) / n


def decode_steps(rollout: RolloutCalibration, response_length: int) -> int:
    """Engine steps a call takes: until its longest completion ends; one cut by the
    calibration's cap is taken to run to `response_length`."""
    if rollout.num_truncated:
        return response_length
    return max(rollout.finished_lengths, default=0)


def kept_fraction(shape: RunShape, rollout: RolloutCalibration) -> float:
    """Of a step's groups, those that train: all of them without the zero-spread filter, or
    when the calibration could not see rewards (cut completions: the upper bound). Else the
    calibration's share of groups with reward spread, with half a group added to each side
    (a few groups are thin evidence: none of 4 with spread is not "never")."""
    if not shape.filter_zero_std or rollout.spread_fraction is None:
        return 1.0
    groups = max(rollout.num_samples // shape.samples_per_prompt, 1)
    return (rollout.spread_fraction * groups + 0.5) / (groups + 1)


def any_kept_probability(kept: float, groups: int) -> float:
    """The chance a step keeps at least one of `groups` groups, each kept with chance `kept`:
    a step that keeps none runs no update and no weight sync."""
    return 1.0 - (1.0 - kept) ** groups


def packed_rows(prompt_tokens: int, response_lengths: list[int], groups: int, samples: int,
                shape: RunShape) -> tuple[list[int], int]:
    """The rows (their token counts) a step packs into, and the rows' width (the longest),
    from the run's packer over `groups` x `samples` sequences: prompts of
    `prompt_tokens`, responses of `response_lengths` in turn (cycled)."""
    seqs = []
    for g in range(groups):
        for i in range(samples):
            n = response_lengths[(g * samples + i) % len(response_lengths)]
            seqs.append(SequenceToPack(prompt_ids=[g] * prompt_tokens, response_ids=[0] * n,
                                       response_logprobs=[0.0] * n, advantage=1.0,
                                       index=g * samples + i))
    units = group_into_units(seqs, shape.pack_length, shape.share_prompts)
    rows = PACKING_STRATEGIES[shape.packing]([u.length for u in units], shape.pack_length)
    row_tokens = [sum(units[u].length for u in row) for row in rows]
    return row_tokens, max(row_tokens, default=0)


def likely_most_kept(groups: int, kept: float, steps: int) -> int:
    """The most groups one of `steps` steps is likely to keep, each of `groups` groups kept
    with chance `kept`: the median of the largest of `steps` binomial draws, the smallest k
    with P(a step keeps at most k)^steps >= 1/2. The peak memory is that step's."""
    at_most = 0.0
    for k in range(groups + 1):
        at_most += math.comb(groups, k) * kept ** k * (1.0 - kept) ** (groups - k)
        if at_most ** max(steps, 1) >= 0.5:
            return k
    return groups


def largest_micro_batch(row_tokens: list[int], width: int, shape: RunShape) -> int:
    """Token slots (rows x width) of the largest micro-batch, cut as the learner cuts them:
    each mini-batch (`num_mini_batches` even parts) into `micro_batches` parts."""
    per_mini = max(math.ceil(len(row_tokens) / shape.num_mini_batches), 1)
    mini_rows = row_tokens[:per_mini]
    parts = plan_micro_batches(mini_rows, shape.micro_batches, shape.micro_batch_tokens)
    return max((len(p) for p in parts), default=0) * width


def learner_seconds(calibration: Calibration, rows: float, width: int, shape: RunShape,
                    p_update: float) -> float:
    """An update over `rows` rows of `width` tokens: every row forward and backward each
    epoch (the calibrated cost a row, scaled by width), the no-grad pass of the mini-batches
    after the first, and one fixed cost per optimizer step; `p_update` of steps run one."""
    c = calibration.learner
    row_s = c.update_s.per_unit * width / c.row_tokens
    old_logprob_rows = rows * (shape.num_mini_batches - 1) / shape.num_mini_batches
    passes_s = row_s * (rows * shape.num_epochs + FORWARD_SHARE * old_logprob_rows)
    return p_update * shape.num_mini_batches * shape.num_epochs * c.update_s.fixed + passes_s


def memory_bytes(calibration: Calibration, micro_batch_tokens: int) -> dict[str, float]:
    """The device's peak by part: what the build held (parameters, engine, the runtime),
    then gradients, AdamW's two moments and the largest micro-batch's activations on top."""
    m = calibration.memory
    grads, optimizer = m.trainable_params, 2 * m.trainable_params
    activations = calibration.learner.activation_bytes.at(micro_batch_tokens)
    training_peak = m.after_build + grads + optimizer + activations
    runtime = m.before_model
    return {"policy_params": m.policy_params, "reference_params": m.reference_params,
            "gradients": grads, "optimizer": optimizer, "activations": activations,
            "engine_weights": max(m.engine - m.kv_cache, 0.0), "kv_cache": m.kv_cache,
            "runtime": runtime, "peak": max(training_peak, m.build_peak),
            "device_total": m.device_total}


def predict(calibration: Calibration, shape: RunShape) -> Prediction:
    r = calibration.rollout
    samples = shape.prompts_per_step * shape.samples_per_prompt
    prompt = round(r.prompt_tokens_mean)
    response = response_tokens_mean(r, shape.response_length)
    kept = kept_fraction(shape, r)
    p_update = any_kept_probability(kept, shape.prompts_per_step)
    lengths = list(r.response_lengths) or [round(response)]
    row_tokens, width = packed_rows(prompt, lengths, shape.prompts_per_step,
                                    shape.samples_per_prompt, shape)
    rows = kept * len(row_tokens)  # a mean over steps: a step packs only the groups it keeps
    generation = r.generation_s.at(decode_steps(r, shape.response_length))
    scoring = r.scoring_s_per_sample * samples
    learner = learner_seconds(calibration, rows, width, shape, p_update)
    sync = p_update * calibration.weight_sync_s
    if shape.async_steps:  # generation runs beside the update; the slower side sets the pace
        step = max(generation + scoring, learner + sync)
    else:
        step = generation + scoring + learner + sync
    # Memory: the largest step the run is likely to see, packed as the learner packs it.
    most = likely_most_kept(shape.prompts_per_step, kept, shape.num_steps)
    peak_rows, peak_width = packed_rows(prompt, lengths, most, shape.samples_per_prompt, shape)
    memory = memory_bytes(calibration, largest_micro_batch(peak_rows, peak_width, shape))
    return Prediction(
        tokens={"prompt": prompt * samples, "response": response * samples,
                "learner": kept * sum(row_tokens), "rows": rows, "row_width": float(width),
                "kept_groups": kept * shape.prompts_per_step},
        seconds={"generation": generation, "scoring": scoring, "learner": learner,
                 "weight_sync": sync, "step": step,
                 "total": calibration.build_s + shape.num_steps * step},
        memory=memory, fits=memory["peak"] <= memory["device_total"],
        assumptions=assumptions(r, shape, kept))


def assumptions(rollout: RolloutCalibration, shape: RunShape, kept: float) -> list[str]:
    """What the figures take for granted, in words, for the table's foot."""
    out = []
    seen = rollout.num_truncated + len(rollout.finished_lengths)
    if rollout.num_truncated and rollout.max_tokens < shape.response_length:
        out.append(f"{rollout.num_truncated} of {seen} calibration completions were cut at "
                   f"{rollout.max_tokens} tokens and are "
                   f"taken to run to response_length={shape.response_length} (an upper bound; "
                   "without --gen-tokens the calibration sees whole ones)")
    if shape.filter_zero_std and rollout.spread_fraction is None:
        out.append("every group is taken to train (rewards of cut completions are unknown; the "
                   "zero-spread filter may drop some)")
    elif shape.filter_zero_std:
        out.append(f"{kept:.0%} of groups train, from the calibration's rewards (the policy's "
                   "pass rate moves during training)")
    out.append("time excludes eval, checkpoints and the exploit canary")
    return out
