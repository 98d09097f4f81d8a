"""A group per prompt, generated and scored, with reward shaping after verification."""

import pytest

from rlvr.producer.groups import RewardShaping, episode_metrics, generate_and_score
from rlvr.rewards.scorer import RewardScorer
from rlvr.types import Completion, Prompt, SamplingParams


class FixedEngine:
    """Prompt 0 answers "3" (stopped) and "4" (cut at the length limit)."""

    def generate(self, prompts, params):
        return [[Completion([5], [-0.1], "stop", "3"), Completion([6, 7], [-0.2, -0.3], "length",
                                                                  "4")] for _ in prompts]


PROMPT = Prompt(id="p/0", messages=(), token_ids=(1,), ground_truth="3",
                verifiers=("last_number",), source="p")


def _score(shaping):
    with RewardScorer(num_workers=0) as scorer:
        return generate_and_score(FixedEngine(), scorer, [PROMPT], SamplingParams(n=2), shaping)


def test_samples_carry_the_verifier_score_and_raw_outcomes():
    episodes = _score(RewardShaping())
    assert [s.reward for s in episodes.groups[0]] == [1.0, 0.0]
    assert [o.score for o in episodes.outcomes[0]] == [1.0, 0.0]


def test_the_non_stop_penalty_applies_to_truncated_samples_only():
    episodes = _score(RewardShaping(non_stop_penalty=True, non_stop_penalty_value=-1.0))
    assert [s.reward for s in episodes.groups[0]] == [1.0, -1.0]
    assert [o.score for o in episodes.outcomes[0]] == [1.0, 0.0]  # the verifier's, unshaped


def test_episode_metrics():
    m = episode_metrics(_score(RewardShaping()))
    assert m["objective/verifiable_reward"] == 0.5 and m["val/stop_rate"] == 0.5
    assert m["val/sequence_lengths"] == pytest.approx(1.5)
