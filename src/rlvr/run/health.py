"""Health gates: pure functions over a run's metric rows that say when the run is going wrong,
each naming its signal, the signal's value, the config bound it crossed and the likely causes
(docs/health.md). A gate reads only what the steps logged (`Run.history`, the current step last),
so it costs a few additions per step and is tested on rows made by hand.

- `mismatch` (stop): the engine's and the learner's logprobs of the same tokens, before any
  update of their batch (`debug/engine_vs_local_logprob_diff_mean`, `debug/engine_vs_local_kl`);
- `reward_vs_heldout`, `length_growth`, `shaping_carries_reward` (warnings): reward hacking;
- `entropy_collapse`, `clip_fraction`, `verifier_errors` (warnings): collapse.

What it is not: acting on a finding (warning, saving the state, stopping: `rlvr.run.stopping.
check_health`, which also holds the stops for every group solved or none, exit 6, and for a
verifier failing every sample, exit 5), nor computing the signals (the learner, the producer
and the scorer log them as metrics).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Mapping, Sequence

from rlvr.config.schema import HealthConfig

Row = Mapping[str, float]  # one step's metrics, as logged

DIFF = "debug/engine_vs_local_logprob_diff_mean"
KL = "debug/engine_vs_local_kl"
REWARD = "objective/scores"  # the reward trained on: the verifier's score after shaping
ACCURACY = "objective/verifiable_reward"  # the verifiers' score alone
HELDOUT = "eval/pass_at_1"
LENGTH = "val/sequence_lengths"
ENTROPY = "policy/entropy_avg"
CLIPFRAC = "policy/clipfrac_avg"

MISMATCH_CAUSES = ("a chat template or tokenizer that differs between the engine and the "
                   "learner (data.chat_template, a server started on another model directory), "
                   "a weight sync that is stale or missing (the engine samples from old "
                   "weights), dtype drift (rollout.dtype against model.dtype: bf16 logits)")


@dataclass(frozen=True)
class Finding:
    """One gate crossed at the current step. `stop`: the run is surely wasted."""

    gate: str
    signal: str  # the metric read
    value: float
    bound: float  # the config bound it crossed
    stop: bool
    message: str  # one line: what, the value against its bound, the likely causes


# (health config, metric rows up to the current step's, samples per prompt) -> finding or None
Gate = Callable[[HealthConfig, Sequence[Row], int], "Finding | None"]


def _mean(values: Sequence[float]) -> float:
    return sum(values) / len(values)


def _halves(h: HealthConfig, rows: Sequence[Row], *keys: str
            ) -> tuple[dict[str, float], dict[str, float]] | None:
    """The means of `keys` over the first and the second half of the last
    `h.window_steps` rows holding all of them; None while fewer are logged."""
    recent = [r for r in rows if all(k in r for k in keys)][-h.window_steps:]
    if len(recent) < h.window_steps:
        return None
    mid = len(recent) // 2
    return ({k: _mean([r[k] for r in recent[:mid]]) for k in keys},
            {k: _mean([r[k] for r in recent[mid:]]) for k in keys})


def mismatch(h: HealthConfig, rows: Sequence[Row], samples_per_prompt: int) -> Finding | None:
    """The engine sampled from another distribution than the learner scores: beyond the warn
    bounds a warning; beyond a stop bound in `stop_after_steps` updates in a row, a stop."""
    now = rows[-1]
    if DIFF not in now:  # no update this step: nothing was compared
        return None
    diff, kl = now[DIFF], now.get(KL, 0.0)

    def past_stop(r: Row) -> bool:
        return r[DIFF] > h.mismatch_stop_logprob_diff or r.get(KL, 0.0) > h.mismatch_stop_kl

    updates = [r for r in rows if DIFF in r][-h.stop_after_steps:]
    stop = len(updates) == h.stop_after_steps and all(past_stop(r) for r in updates)
    level = "stop" if past_stop(now) else "warn"
    by_diff = diff > getattr(h, f"mismatch_{level}_logprob_diff")
    if not by_diff and kl <= getattr(h, f"mismatch_{level}_kl"):
        return None
    signal, value = (DIFF, diff) if by_diff else (KL, kl)
    field = f"health.mismatch_{level}_{'logprob_diff' if by_diff else 'kl'}"
    bound = getattr(h, field.split(".")[1])
    streak = f" in {len(updates)} updates in a row" if stop else ""
    return Finding("mismatch", signal, value, bound, stop, (
        f"sampler/trainer mismatch: the engine's and the learner's logprobs of the same tokens "
        f"differ by {diff:.3g} nats per token on average, KL(engine || learner) {kl:.3g} per "
        f"token ({signal}={value:.3g} > {field}={bound:g}){streak}, before any update of "
        f"their batch: the learner trains on samples from another policy than its own. Usual "
        f"causes: {MISMATCH_CAUSES}"))


def reward_vs_heldout(h: HealthConfig, rows: Sequence[Row], samples_per_prompt: int
                      ) -> Finding | None:
    """At an eval: over the last `hacking_evals` evals, the training reward (averaged over the
    steps up to each eval) rose by `reward_rise` or more while held-out pass@1 did not rise
    by `flat_reward`."""
    if HELDOUT not in rows[-1]:
        return None
    evals = [i for i, r in enumerate(rows) if HELDOUT in r]
    windows = [[r[REWARD] for r in rows[a + 1:b + 1] if REWARD in r]
               for a, b in zip([-1, *evals], evals)]
    points = [(rows[i][HELDOUT], _mean(w)) for i, w in zip(evals, windows) if w]
    points = points[-h.hacking_evals:]
    if len(points) < h.hacking_evals:
        return None
    (held_first, reward_first), (held_last, reward_last) = points[0], points[-1]
    rise, held = reward_last - reward_first, held_last - held_first
    if rise < h.reward_rise or held >= h.flat_reward:
        return None
    return Finding("reward_vs_heldout", REWARD, rise, h.reward_rise, False, (
        f"reward hacking? over the last {len(points)} evals the training reward rose by "
        f"{rise:.3g} ({REWARD} {reward_first:.3g} -> {reward_last:.3g}, health.reward_rise="
        f"{h.reward_rise:g}) while held-out {HELDOUT} {'fell' if held < 0 else 'stayed flat'} "
        f"({held_first:.3g} -> {held_last:.3g}, health.flat_reward={h.flat_reward:g}): the "
        "policy learns what the training verifier pays, not the task. Usual causes: a verifier "
        "that pays a wrong or partial answer (a loose answer extractor, a format-only reward), "
        "training prompts that differ from the held-out ones, overfitting a small training set"))


def length_growth(h: HealthConfig, rows: Sequence[Row], samples_per_prompt: int
                  ) -> Finding | None:
    """Over the last `window_steps` steps, responses grew by `length_growth` or more (second
    half against first) while the reward moved by less than `flat_reward`."""
    halves = _halves(h, rows, LENGTH, REWARD)
    if halves is None or halves[0][LENGTH] <= 0:
        return None
    before, after = halves
    growth = after[LENGTH] / before[LENGTH] - 1.0
    moved = after[REWARD] - before[REWARD]
    if growth < h.length_growth or abs(moved) >= h.flat_reward:
        return None
    return Finding("length_growth", LENGTH, growth, h.length_growth, False, (
        f"reward hacking? over the last {h.window_steps} steps responses grew by "
        f"{growth:.0%} ({LENGTH} {before[LENGTH]:.4g} -> {after[LENGTH]:.4g}, "
        f"health.length_growth={h.length_growth:g}) while the reward stayed flat ({REWARD} "
        f"{before[REWARD]:.3g} -> {after[REWARD]:.3g}, health.flat_reward={h.flat_reward:g}): "
        "length buys nothing here. Usual causes: a per-token loss that favours long wrong "
        "answers (algorithm.loss_fn, truncated completions trained on: "
        "algorithm.mask_truncated_completions), repetition loops until response_length"))


def shaping_carries_reward(h: HealthConfig, rows: Sequence[Row], samples_per_prompt: int
                           ) -> Finding | None:
    """Over the last `window_steps` steps, the shaping part of the reward (format reward,
    non-stop and overlong penalties: reward minus the verifiers' score) rose by
    `reward_rise` or more while the verifiers' score moved by less than `flat_reward`."""
    halves = _halves(h, rows, REWARD, ACCURACY)
    if halves is None:
        return None
    before, after = halves
    shaping_before = before[REWARD] - before[ACCURACY]
    shaping_after = after[REWARD] - after[ACCURACY]
    rise, accuracy = shaping_after - shaping_before, after[ACCURACY] - before[ACCURACY]
    if rise < h.reward_rise or abs(accuracy) >= h.flat_reward:
        return None
    return Finding("shaping_carries_reward", REWARD, rise, h.reward_rise, False, (
        f"reward hacking? over the last {h.window_steps} steps the reward's shaping (format "
        f"reward, non-stop and overlong penalties: {REWARD} - {ACCURACY}) rose by {rise:.3g} "
        f"({shaping_before:.3g} -> {shaping_after:.3g}, health.reward_rise={h.reward_rise:g}) "
        f"while accuracy did not move ({ACCURACY} {before[ACCURACY]:.3g} -> "
        f"{after[ACCURACY]:.3g}, health.flat_reward={h.flat_reward:g}): the policy learns the "
        "format or the length, not the answers. Usual causes: a format reward "
        "(rewards.r1_style_format_reward) or penalty large against the verifier's score"))


def entropy_collapse(h: HealthConfig, rows: Sequence[Row], samples_per_prompt: int
                     ) -> Finding | None:
    value = rows[-1].get(ENTROPY)
    if value is None or value >= h.entropy_min:
        return None
    return Finding("entropy_collapse", ENTROPY, value, h.entropy_min, False, (
        f"entropy collapse: {ENTROPY}={value:.3g} nats per token < health.entropy_min="
        f"{h.entropy_min:g}: the policy samples nearly one answer per prompt, so a group's "
        "samples stop differing and the learning signal dies. Usual causes: a learning rate "
        "too high, too many epochs or mini-batches per batch, no clip-higher "
        "(algorithm.clip_higher), a sampling temperature below 1"))


def clip_fraction(h: HealthConfig, rows: Sequence[Row], samples_per_prompt: int
                  ) -> Finding | None:
    value = rows[-1].get(CLIPFRAC)
    if value is None or value <= h.clipfrac_max:
        return None
    return Finding("clip_fraction", CLIPFRAC, value, h.clipfrac_max, False, (
        f"clip fraction out of range: {value:.0%} of the policy tokens were clipped "
        f"({CLIPFRAC}={value:.3g} > health.clipfrac_max={h.clipfrac_max:g}): each update moves "
        "the policy past the trust region and the clipped tokens teach nothing. Usual causes: "
        "a learning rate too high, too many epochs or mini-batches per batch "
        "(algorithm.num_epochs, num_mini_batches), samples far off-policy (rollout.async_steps)"))


def verifier_error_rate(row: Row, samples_per_prompt: int) -> float | None:
    """The share of a step's samples whose verifier failed (errors and timeouts), the
    `verifier_errors` gate's signal (the report plots it too); None for a step without
    sampled prompts."""
    prompts = row.get("batch/prompts_sampled")
    if not prompts:
        return None
    failed = row.get("reward/verifier_errors", 0.0) + row.get("reward/verifier_timeouts", 0.0)
    return failed / (prompts * samples_per_prompt)


def verifier_errors(h: HealthConfig, rows: Sequence[Row], samples_per_prompt: int
                    ) -> Finding | None:
    now = rows[-1]
    rate = verifier_error_rate(now, samples_per_prompt)
    if rate is None or rate <= h.verifier_error_rate_max:
        return None
    errors = now.get("reward/verifier_errors", 0.0)
    timeouts = now.get("reward/verifier_timeouts", 0.0)
    samples = now["batch/prompts_sampled"] * samples_per_prompt
    return Finding("verifier_errors", "reward/verifier_errors", rate, h.verifier_error_rate_max,
                   False, (
        f"verifier errors: {rate:.0%} of the step's {samples:g} samples failed their verifier "
        f"({errors:g} errors, {timeouts:g} timeouts; health.verifier_error_rate_max="
        f"{h.verifier_error_rate_max:g}): a failed sample scores 0, so right answers are "
        "trained against. Usual causes: a verifier bug or a ground truth it cannot read, "
        "rewards.timeout_s too short, a judge or sandbox overloaded; the traces "
        "(logging.save_traces) show which samples"))


GATES: tuple[Gate, ...] = (mismatch, reward_vs_heldout, length_growth, shaping_carries_reward,
                           entropy_collapse, clip_fraction, verifier_errors)


def read_gates(h: HealthConfig, rows: Sequence[Row], samples_per_prompt: int) -> list[Finding]:
    """Every gate crossed at the last of `rows` (the current step's metrics), in `GATES`'
    order."""
    if not h.enabled or not rows:
        return []
    return [f for gate in GATES if (f := gate(h, rows, samples_per_prompt)) is not None]
