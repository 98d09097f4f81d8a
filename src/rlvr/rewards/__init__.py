"""Rewards: verifiers behind one small protocol, and the bounded scorer that runs them.

A verifier is a plain function `(completion, ground_truth) -> score`, registered under the name a
data row carries (`gsm8k`, `math`, `string_matcher`, `ifeval`, `code`, ...). `RewardScorer`
runs them in worker processes under a time limit and turns errors and timeouts into recorded,
counted outcomes. A verifier may also ask for the prompt, the episode's messages and the row's
metadata (`registry`); `llm_judge` has a second model grade the answer (`judge`), in the
scorer's own process.

Importing this package registers the built-in verifiers and imports neither torch nor
math-verify, so data readers and fresh worker processes can import it cheaply.
"""

from rlvr.rewards import gsm8k as _gsm8k  # noqa: F401  (registers gsm8k, last_number)
from rlvr.rewards import math as _math  # noqa: F401  (registers math, strict_math)
from rlvr.rewards import string_match as _string_match  # noqa: F401  (string_*, *max_length)
from rlvr.rewards import code as _code  # noqa: F401  (registers code)
from rlvr.rewards import ifeval as _ifeval  # noqa: F401  (registers ifeval and its constraints)
from rlvr.rewards import judge as _judge  # noqa: F401  (registers llm_judge, a batched verifier)
from rlvr.rewards.format import format_reward_scores, has_r1_format, strip_thinking
from rlvr.rewards.penalties import apply_non_stop_penalty, soft_overlong_penalty
from rlvr.rewards.registry import (VERIFIERS, Verifier, answer_extractor, get_verifier,
                                   ground_truth_check, is_known_verifier, register_verifier)
from rlvr.rewards.scorer import AGGREGATORS, RewardScorer, ScoreRequest

__all__ = ["AGGREGATORS", "VERIFIERS", "RewardScorer", "ScoreRequest", "Verifier",
           "answer_extractor", "apply_non_stop_penalty", "format_reward_scores", "get_verifier",
           "ground_truth_check", "has_r1_format", "is_known_verifier", "register_verifier",
           "soft_overlong_penalty", "strip_thinking"]
