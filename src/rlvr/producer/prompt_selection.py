"""Which prompts a step trains on: one draw, or DAPO-style active sampling that keeps drawing
until the batch holds enough groups whose rewards differ (the only groups with gradient), and
retirement of prompts the policy already solves.

What the policy did and what it trains on are two sets: `Collected.sampled` holds every group
the step generated, `Collected.kept` those it trains on. Retirement and the step's reward
metrics read `sampled`: a prompt solved by every sample is exactly a group active sampling
leaves out (no spread), so judged on `kept` it would never retire and the reward would be
reported without the solved prompts (open-instruct's `process_group` also retires before its
zero-spread filter).
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Callable, NamedTuple

import torch

from rlvr.algorithm.filtering import group_has_signal
from rlvr.device import HOST
from rlvr.producer.groups import Episodes
from rlvr.rollout.seeds import derive_seed
from rlvr.types import Prompt, SamplingParams


@dataclass(frozen=True)
class ActiveSampling:
    enabled: bool = False
    max_rounds: int = 4  # bound on generation rounds per step


# prompts, sampling -> their scored groups and the workflow's metrics (`EpisodeRunner.run`)
RunGroups = Callable[[list[Prompt], SamplingParams], tuple[Episodes, dict[str, float]]]


class Collected(NamedTuple):
    kept: Episodes  # the groups the step trains on
    sampled: Episodes  # every group the step generated, over all rounds, `kept` among them
    metrics: dict[str, float]  # the workflow's, and how many rounds and prompts it took


def collect_episodes(run_groups: RunGroups, next_prompts: Callable[[int], list[Prompt]],
                     num_prompts: int, params: SamplingParams,
                     active: ActiveSampling) -> Collected:
    episodes, workflow_metrics = run_groups(next_prompts(num_prompts), params)
    if not active.enabled:
        return Collected(episodes, episodes, {**workflow_metrics, "batch/sampling_rounds": 1.0,
                                              "batch/prompts_sampled": num_prompts})
    sampled = Episodes(groups=list(episodes.groups), outcomes=list(episodes.outcomes))
    kept = _with_signal(episodes)
    rounds, drawn = 1, num_prompts
    while len(kept.groups) < num_prompts and rounds < active.max_rounds:
        missing = num_prompts - len(kept.groups)
        # A fresh seed per round: the same seed would redraw the same samples for a prompt.
        round_params = replace(params, seed=None if params.seed is None
                               else derive_seed(params.seed, round=rounds))
        more, more_metrics = run_groups(next_prompts(missing), round_params)
        sampled.groups += more.groups
        sampled.outcomes += more.outcomes
        more = _with_signal(more)
        workflow_metrics = _merge_rounds(workflow_metrics, more_metrics, rounds)
        kept.groups += more.groups
        kept.outcomes += more.outcomes
        rounds, drawn = rounds + 1, drawn + missing
    kept.groups, kept.outcomes = kept.groups[:num_prompts], kept.outcomes[:num_prompts]
    return Collected(kept, sampled, {
        **workflow_metrics, "batch/sampling_rounds": float(rounds),
        "batch/prompts_sampled": float(drawn),
        "batch/active_sampling_shortfall": float(num_prompts - len(kept.groups))})


def _merge_rounds(so_far: dict[str, float], more: dict[str, float],
                  rounds: int) -> dict[str, float]:
    """Counts add up over rounds; `*_mean` figures average (each round weighs the same)."""
    merged = dict(so_far)
    for key, value in more.items():
        if key.endswith("_mean"):
            merged[key] = (so_far.get(key, 0.0) * rounds + value) / (rounds + 1)
        else:
            merged[key] = so_far.get(key, 0.0) + value
    return merged


def _with_signal(episodes: Episodes) -> Episodes:
    if not episodes.groups:
        return episodes
    rewards_NG = torch.tensor([[s.reward for s in g] for g in episodes.groups],
                              device=HOST)
    keep = group_has_signal(rewards_NG).tolist()
    return Episodes(groups=[g for g, k in zip(episodes.groups, keep) if k],
                    outcomes=[o for o, k in zip(episodes.outcomes, keep) if k])


def solved_prompt_ids(episodes: Episodes, pass_rate: float, max_reward: float = 1.0
                      ) -> list[str]:
    """Prompts whose samples' mean reward is at least `pass_rate` of the most a sample can earn
    (`RewardShaping.max_reward`), as open-instruct's `process_group` judges `percent_solved`.
    Counting samples at full marks (>= 1) instead, a discounted multi-turn win, an overlong-
    penalised right answer or partial credit never counted as solved. Give it every group the
    step sampled (`Collected.sampled`), not only those kept for training."""
    solved = []
    for group in episodes.groups:
        rate = sum(s.reward for s in group) / len(group) / max_reward
        if rate >= pass_rate:
            solved.append(group[0].prompt.id)
    return solved
