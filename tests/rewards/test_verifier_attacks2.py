"""Reward hacks from the second verifier audit, each pinned by the attack that found it.

An answer that says nothing (empty, zero-width characters, a Hangul filler, a lone ".", a
`<think>` never closed) earns nothing from the length verifiers, from ifeval or from the R1
format reward; a verifier's return value that is no score (a str, None, a magnitude float32
cannot hold) is a counted error scoring 0, from a worker verifier and a batched one alike.

The verifiers that misbehave here are named by module path; the scorer's workers import this
module to find them, so it keeps its imports light enough (torch is imported in the one test
that needs it).
"""

import json
import math
from fractions import Fraction

import numpy as np
import pytest

from rlvr.rewards import RewardScorer, ScoreRequest, get_verifier
from rlvr.rewards.batched import BatchScore, combine
from rlvr.rewards.format import has_r1_format
from rlvr.rewards.registry import BATCHED_VERIFIERS
from rlvr.rewards.verifier_worker import run_verifiers

THIS = "tests.rewards.test_verifier_attacks2"

# Answers with no letter or digit in them, as the verifiers see them.
SAYS_NOTHING = {
    "empty": "",
    "whitespace": " \n\t ",
    "zero-width space": "\u200b",
    "word joiner and BOM": "\u2060\ufeff",
    "Hangul filler": "\u3164",  # str.isalpha() is True for it
    "halfwidth Hangul filler": "\uffa0",
    "a full stop": ".",
    "punctuation runs": "... ! -- \u200b ?",
    "think never closed": "<think>I will think about this forever",
    "nothing after the thinking": "<think>" + "word " * 500 + "</think>",
    "zero-width inside answer tags": "some essay <answer>\u200b</answer>",
}


@pytest.mark.parametrize("name, target", [("up_to_max_length", "50"), ("max_length", "1")])
@pytest.mark.parametrize("completion", SAYS_NOTHING.values(), ids=SAYS_NOTHING.keys())
def test_length_verifiers_pay_nothing_for_an_answer_with_no_word(name, target, completion):
    """HEAD paid up_to_max_length 1.0 for all of these (no words is under any limit), and
    max_length 1.0 for "." or "\\u200b" against a target of 1 word."""
    assert get_verifier(name)(completion, target) == 0.0


def test_padding_with_punctuation_does_not_reach_a_length_target():
    """A word holds a letter or digit: "Paris" padded with four "." is one word, not five."""
    max_length = get_verifier("max_length")
    assert max_length("Paris . . . .", "5") == max_length("Paris", "5") == pytest.approx(0.2)
    assert max_length("Paris is the capital city", "5") == 1.0
    assert get_verifier("up_to_max_length")("Paris", "50") == 1.0


# "Write ... in all lowercase, no commas, under 50 words, without the word 'cheap'".
REALISTIC_ROW = json.dumps([
    {"id": "change_case:english_lowercase", "kwargs": {}},
    {"id": "punctuation:no_comma", "kwargs": {}},
    {"id": "length_constraints:number_words",
     "kwargs": {"relation": "less than", "num_words": 50}},
    {"id": "keywords:forbidden_words", "kwargs": {"forbidden_words": ["cheap"]}},
])


@pytest.mark.parametrize("completion", SAYS_NOTHING.values(), ids=SAYS_NOTHING.keys())
def test_ifeval_pays_nothing_for_an_answer_with_no_letter_or_digit(completion):
    """HEAD's guard was `answer.strip()`: "\\u200b", "\\u2060", "\\u3164" and "." scored 0.75."""
    assert get_verifier("ifeval")(completion, REALISTIC_ROW) == 0.0


@pytest.mark.parametrize("constraint", ["words:no_consecutive", "words:paragraph_last_first",
                                        "words:vowel", "format:no_whitespace", "format:newline"])
def test_ifeval_single_constraint_rows_pay_nothing_for_a_zero_width_answer(constraint):
    row = json.dumps([{"id": constraint, "kwargs": {}}])
    assert get_verifier("ifeval")("\u200b", row) == 0.0


def test_ifeval_still_pays_a_short_real_answer():
    assert get_verifier("ifeval")("ok", REALISTIC_ROW) == 1.0
    # A letter of any script is an answer: all but "english_lowercase" are met.
    assert get_verifier("ifeval")("<think>plan</think>一", REALISTIC_ROW) == 0.75


@pytest.mark.parametrize("text", [
    "<think>\u200b</think><answer>\u200b</answer>",
    "<think>.</think><answer>.</answer>",
    "<think>real reasoning</think><answer>\u2060</answer>",
    "<think>\u3164</think><answer>4</answer>",
    "<think>- - -</think><answer>42</answer>",
])
def test_r1_format_needs_a_letter_or_digit_in_each_part(text):
    assert has_r1_format(text) is False


def test_r1_format_takes_any_script():
    assert has_r1_format("<think>思考する</think><answer>\u0664</answer>")  # Arabic-Indic 4


@pytest.mark.parametrize("text, expected", [
    ("a", True), ("7", True), ("\u0664", True), ("é", True), ("中", True),
    ("", False), (" .,;!? ", False), ("\u200b\u200c\u200d\u2060\ufeff\u00ad", False),
    ("\u115f\u1160\u3164\uffa0", False), ("\u3164a", True), ("∞ → ★ 🎉", False),
])
def test_has_letter_or_digit(text, expected):
    from rlvr.rewards.format import has_letter_or_digit  # new: imported here, not at the top

    assert has_letter_or_digit(text) is expected


# ---------------------------------------------------------------- what a verifier may return

# What `returns` gives back, by the ground truth it is asked about.
RETURNS = {
    "str": "1", "none": None, "complex": 1 + 0j, "list": [1.0], "inf": math.inf,
    "numpy nan": np.float32("nan"), "numpy bool": np.bool_(True),
    "inf in float32": 1e39, "numpy 7e38": np.float64(3.5e38) * 2, "under -1e6": -1e6 - 1,
    "true": True, "false": False, "int": 1, "numpy float32": np.float32(0.5),
    "fraction": Fraction(1, 4), "-1e6": -1e6, "1e6": 1e6,
}


def returns(completion: str, ground_truth: str) -> object:
    """A verifier returning `RETURNS[ground_truth]`, whatever it is."""
    return RETURNS[ground_truth]


def _run(key: str) -> tuple[list[float], str | None]:
    return run_verifiers("x", key, (f"{THIS}:returns",))


@pytest.mark.parametrize("key", ["str", "none", "complex", "list", "inf", "numpy nan",
                                 "numpy bool", "inf in float32", "numpy 7e38", "under -1e6"])
def test_a_return_value_that_is_no_score_is_an_error_scoring_zero(key):
    """HEAD took "1" as 1.0 (float("1")) and 1e39 as a score, which is inf as float32."""
    scores, error = _run(key)
    assert scores == [0.0]
    assert error is not None and error.startswith(f"{THIS}:returns: ValueError: ")


@pytest.mark.parametrize("key, score", [("true", 1.0), ("false", 0.0), ("int", 1.0),
                                        ("numpy float32", 0.5), ("fraction", 0.25),
                                        ("-1e6", -1e6), ("1e6", 1e6)])
def test_a_real_number_within_the_bound_is_a_score(key, score):
    assert _run(key) == ([score], None)
    assert type(_run(key)[0][0]) is float


def test_a_group_keeps_finite_advantages_when_a_verifier_returns_1e39():
    import torch

    from rlvr.algorithm.advantages import compute_group_advantages

    truths = ["int", "numpy float32", "inf in float32", "false"]
    with RewardScorer(num_workers=1, timeout_s=10.0) as scorer:
        out = scorer.score([ScoreRequest(f"s{i}", "x", t, (f"{THIS}:returns",))
                            for i, t in enumerate(truths)])
        counts = scorer.metrics_since_last()
    assert [o.score for o in out] == [1.0, 0.5, 0.0, 0.0]
    assert "beyond the bound" in out[2].error and counts["reward/verifier_errors"] == 1
    rewards_NG = torch.tensor([[o.score for o in out]], dtype=torch.float32)
    for normalization in ("standard", "centered"):
        assert torch.isfinite(compute_group_advantages(rewards_NG, normalization)).all()


STUB = "test_attacks2_batched_stub"
if STUB not in BATCHED_VERIFIERS:
    BATCHED_VERIFIERS.add(STUB, "the test's stub", defined_by=returns)


@pytest.mark.parametrize("key", ["str", "none", "inf", "numpy nan", "inf in float32"])
def test_a_batched_verifier_s_score_is_checked_like_a_worker_s(key):
    """HEAD's `combine` passed a batched score through unchecked, NaN included."""
    scores, error, timed_out = combine(("gsm8k", STUB), ([1.0], None, False),
                                       {STUB: BatchScore(RETURNS[key])})
    assert scores == [1.0, 0.0] and not timed_out
    assert error is not None and error.startswith(f"{STUB}: ValueError: ")
    # A stage's own error is kept beside the refusal.
    _, error, _ = combine((STUB,), None, {STUB: BatchScore(RETURNS[key], error="judge said x")})
    assert error.startswith(f"{STUB}: judge said x; ValueError: ")


def test_a_batched_verifier_s_real_score_passes():
    assert combine((STUB,), None, {STUB: BatchScore(True)}) == ([1.0], None, False)
    assert combine((STUB,), None, {STUB: BatchScore(np.float32(0.5))}) == ([0.5], None, False)


class HugeStage:
    """A batched stage that scores every request 1e39."""

    def score_batch(self, requests):
        return [BatchScore(1e39) for _ in requests]

    def close(self):
        pass


def test_the_scorer_counts_a_batched_score_refused():
    with RewardScorer(num_workers=0, batched={STUB: HugeStage()}) as scorer:
        (outcome,) = scorer.score([ScoreRequest("s0", "x", "7", (STUB,))])
        counts = scorer.metrics_since_last()
    assert outcome.score == 0.0 and "beyond the bound" in outcome.error
    assert counts["reward/verifier_errors"] == 1
