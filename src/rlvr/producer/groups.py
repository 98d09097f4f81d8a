"""Generate a group of completions per prompt and score them: prompts in, `Sample` groups out.

This is the only place where the engine's output meets the verifiers; the engine knows nothing
of rewards and the scorer nothing of tokens. Reward shaping that depends on how a completion
ended (the non-stop penalty) or how it is laid out (the R1 format reward) happens here, after
verification.
"""

from __future__ import annotations

from dataclasses import dataclass

from rlvr.rewards.format import format_reward_scores, has_r1_format
from rlvr.rewards.penalties import apply_non_stop_penalty, soft_overlong_penalty
from rlvr.rewards.scorer import RewardScorer, ScoreRequest
from rlvr.rollout.base import RolloutEngine
from rlvr.types import Completion, Prompt, RewardOutcome, SamplingParams, Sample


@dataclass(frozen=True)
class RewardShaping:
    non_stop_penalty: bool = False
    non_stop_penalty_value: float = 0.0
    overlong_buffer: int = 0  # DAPO soft overlong penalty over this many tokens; 0 disables
    overlong_penalty_factor: float = 1.0
    max_tokens: int = 0  # the response length limit the overlong penalty counts toward
    format_reward: bool = False  # R1 <think>/<answer> format: gate the score, or add a bonus
    format_reward_value: float = 1.0
    additive_format_reward: bool = False

    @property
    def max_reward(self) -> float:
        """The most a sample can earn: full marks from the verifier (1), plus the format bonus
        when it is added (penalties only take away). open-instruct's `max_possible_score`."""
        bonus = self.format_reward_value if self.format_reward and self.additive_format_reward else 0
        return 1.0 + max(0.0, bonus)


@dataclass
class Episodes:
    """`groups[i]` holds the samples of the i-th prompt; `outcomes` the raw verifier results."""

    groups: list[list[Sample]]
    outcomes: list[list[RewardOutcome]]
    # Groups the trainer left out before advantages (too stale to train on), with their
    # outcomes: not trained, kept only so the traces show them.
    dropped_stale: "Episodes | None" = None
    # The first verifier failure when every sample the step SAMPLED failed its verifier
    # (`rlvr.run.faults.verification_failure`), else None. Set by the source: with active sampling
    # the groups kept are only those with reward spread, so a verifier failing every sample
    # left none, and judged on them the step looked like one with nothing to learn.
    sampled_failure: str | None = None


def generate_and_score(engine: RolloutEngine, scorer: RewardScorer, prompts: list[Prompt],
                       params: SamplingParams, shaping: RewardShaping = RewardShaping()) -> Episodes:
    """One engine call and one scoring call for every prompt: the single-turn episode without
    the workflow machinery, the reference `rlvr.workflows.single_turn` must reproduce (training
    and evaluation both run the run's workflow, `rlvr.workflows.runner`)."""
    completions = engine.generate([list(p.token_ids) for p in prompts], params)
    requests = [ScoreRequest.for_prompt(p, k, c.text)
                for p, group in zip(prompts, completions) for k, c in enumerate(group)]
    flat_outcomes = scorer.score(requests)
    scores = shape_rewards([o.score for o in flat_outcomes],
                           [c for group in completions for c in group], shaping)
    groups, outcomes, i = [], [], 0
    for p, group in zip(prompts, completions):
        groups.append([Sample(prompt=p, completion=c, reward=scores[i + k])
                       for k, c in enumerate(group)])
        outcomes.append(flat_outcomes[i:i + len(group)])
        i += len(group)
    return Episodes(groups=groups, outcomes=outcomes)


def shape_rewards(scores: list[float], completions: list[Completion],
                  shaping: RewardShaping,
                  turn_lengths: list[list[int]] | None = None) -> list[float]:
    """Verifier scores -> rewards: the R1 format reward, the non-stop penalty and DAPO's soft
    overlong penalty, each completion on its own (so a group or a whole step gives the same).
    Lengths count the model's tokens only (a multi-turn episode's given tokens are free).

    `turn_lengths[k]`, where given, holds the length of each model turn of completion k's
    episode (`completions[k]` is then its last turn, whose text the format reward reads): each
    turn was one generation against the length limit, so the overlong penalty is the worst of
    its turns'. Counting the last turn only let every earlier turn run to the limit unpunished
    (a tool_use episode's long tool calls before a short answer)."""
    if shaping.format_reward:
        scores = format_reward_scores(scores, [c.text for c in completions],
                                      shaping.format_reward_value,
                                      shaping.additive_format_reward)
    if shaping.non_stop_penalty:
        scores = apply_non_stop_penalty(scores, [c.truncated for c in completions],
                                        shaping.non_stop_penalty_value)
    if shaping.overlong_buffer > 0:
        if turn_lengths is None:
            turn_lengths = [[len(c.token_ids_T) if c.loss_mask_T is None else sum(c.loss_mask_T)]
                            for c in completions]
        if len(turn_lengths) != len(completions) or not all(turn_lengths):
            raise ValueError("turn_lengths needs one non-empty list of turn lengths a completion")
        penalties = [min(soft_overlong_penalty(lengths, shaping.max_tokens,
                                               shaping.overlong_buffer,
                                               shaping.overlong_penalty_factor))
                     for lengths in turn_lengths]
        scores = [s + p for s, p in zip(scores, penalties)]
    return list(scores)


def episode_metrics(episodes: Episodes, prefix: str = "") -> dict[str, float]:
    """Rewards and lengths of a step's samples (per-sample means; lengths in tokens)."""
    samples = [s for g in episodes.groups for s in g]
    outcomes = [o for g in episodes.outcomes for o in g]
    if not samples:
        return {}
    n = len(samples)
    lengths = [len(s.completion.token_ids_T) for s in samples]
    return {
        f"{prefix}objective/verifiable_reward": sum(o.score for o in outcomes) / n,
        f"{prefix}objective/scores": sum(s.reward for s in samples) / n,
        f"{prefix}val/sequence_lengths": sum(lengths) / n,
        f"{prefix}val/sequence_lengths_min": float(min(lengths)),
        f"{prefix}val/sequence_lengths_max": float(max(lengths)),
        f"{prefix}val/stop_rate": sum(not s.completion.truncated for s in samples) / n,
        f"{prefix}val/format_rate": sum(has_r1_format(s.completion.text) for s in samples) / n,
    }
