"""In-loop evaluation on the held-out prompts: one sample per prompt, scored by the verifiers.

Reports the mean score, pass@1 (fraction of prompts whose sample scores full marks) and the stop
rate. Greedy by default, so the figure moves only when the policy does.
"""

from __future__ import annotations

from rlvr.producer.groups import generate_and_score
from rlvr.rewards.scorer import RewardScorer
from rlvr.rollout.base import RolloutEngine
from rlvr.types import Prompt, SamplingParams


def evaluate(engine: RolloutEngine, scorer: RewardScorer, prompts: list[Prompt],
             params: SamplingParams) -> dict[str, float]:
    if not prompts:
        return {}
    episodes = generate_and_score(engine, scorer, prompts, params)
    samples = [s for g in episodes.groups for s in g]
    n = len(samples)
    return {
        "eval/scores": sum(s.reward for s in samples) / n,
        "eval/pass_at_1": sum(s.reward >= 1.0 for s in samples) / n,
        "eval/stop_rate": sum(not s.completion.truncated for s in samples) / n,
        "eval/sequence_lengths": sum(len(s.completion.token_ids_T) for s in samples) / n,
    }
