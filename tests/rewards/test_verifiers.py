"""Verifiers: true positives, true negatives and the known traps, table-driven."""

import pytest

from rlvr.rewards import apply_non_stop_penalty, get_verifier
from rlvr.rewards.math import extract_candidate, last_boxed


@pytest.mark.parametrize("completion, truth, score", [
    ("The answer is 8.", "8", 1.0),
    ("3 + 5 = 8", "8", 1.0),  # the last number counts
    ("8 apples, no wait, 9", "8", 0.0),
    ("It costs 1,000 dollars", "1000", 1.0),  # thousands separators are stripped
    ("the change is -3", "-3", 1.0),  # sign kept
    ("the change is 3", "-3", 0.0),
    ("about 2.50", "2.5", 1.0),
    ("no number here", "4", 0.0),
    ("Janet sells 16 - 3 - 4 = 9 eggs, making $18.", "Natalia ... #### 18", 1.0),  # GSM8K gold
])
def test_last_number(completion, truth, score):
    assert get_verifier("gsm8k")(completion, truth) == score
    assert get_verifier("last_number")(completion, truth) == score


def test_gold_without_a_number_is_an_error():
    with pytest.raises(ValueError, match="holds no number"):
        get_verifier("gsm8k")("7", "seven")


@pytest.mark.parametrize("completion, truth, score", [
    ("So the answer is \\boxed{\\frac12}.", "0.5", 1.0),  # \frac12 vs 0.5
    ("\\boxed{\\frac{1}{2}}", "\\frac{1}{2}", 1.0),  # nested braces
    ("\\boxed{3}", "4", 0.0),
    ("The final answer is 7", "7", 1.0),
    ("we get $x = 2$ and so $5$", "5", 1.0),  # the last $...$
    ("\\boxed{10\\text{ cm}}", "10", 1.0),  # units
    ("\\boxed{\\sqrt{2}/2}", "\\frac{\\sqrt{2}}{2}", 1.0),
])
def test_math(completion, truth, score):
    assert get_verifier("math")(completion, truth) == score


def test_last_boxed_handles_nesting_and_unbalanced():
    assert last_boxed("a \\boxed{1} b \\boxed{\\frac{a}{b}}") == "\\frac{a}{b}"
    assert last_boxed("\\boxed{\\frac{1}{2}") is None
    assert extract_candidate("plain 42") == "plain 42"


def test_unknown_verifier_lists_known_ones():
    with pytest.raises(KeyError, match="gsm8k"):
        get_verifier("nope")


def test_non_stop_penalty_replaces_truncated_scores():
    assert apply_non_stop_penalty([1.0, 0.5, 1.0], [False, True, True], -1.0) == [1.0, -1.0, -1.0]
