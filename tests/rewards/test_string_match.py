"""`string_matcher`, `string_f1`, `max_length`, `up_to_max_length`, table-driven."""

import json

import pytest

from rlvr.rewards import get_verifier
from rlvr.rewards.registry import ground_truth_check


@pytest.mark.parametrize("completion, truth, expected", [
    ("Paris", "paris", 1.0),
    ("<answer> The Paris. </answer>", "Paris", 1.0),  # articles, punctuation, case
    ("<think>maybe paris</think><answer>Lyon</answer>", "Paris", 0.0),
    ("<think>paris</think>", "Paris", 0.0),  # thinking is not answering
    ("The capital is Paris", "Paris", 0.0),  # exact match, not containment
    ("<answer>New   York</answer>", "new york", 1.0),
    ("", "paris", 0.0),
])
def test_string_matcher(completion, truth, expected):
    assert get_verifier("string_matcher")(completion, truth) == expected


@pytest.mark.parametrize("completion, truth, expected", [
    ("the city of paris", json.dumps(["the city of paris"]), 1.0),
    ("paris", json.dumps(["city of paris"]), 0.5),  # precision 1, recall 1/3
    ("london", json.dumps(["paris", "london"]), 1.0),  # the best label counts
    ("rome", "paris", 0.0),  # a plain string is one label
    ("<think>paris</think>rome", "paris", 0.0),
])
def test_string_f1(completion, truth, expected):
    assert get_verifier("string_f1")(completion, truth) == expected


@pytest.mark.parametrize("name, words, target, expected", [
    ("max_length", 10, "10", 1.0),
    ("max_length", 5, "10", 0.5),
    ("max_length", 15, "10", 0.5),
    ("max_length", 30, "10", 0.0),
    ("up_to_max_length", 3, "10", 1.0),
    ("up_to_max_length", 15, "10", 0.5),
    ("up_to_max_length", 25, "10", 0.0),
])
def test_length_verifiers(name, words, target, expected):
    assert get_verifier(name)(" ".join(["w"] * words), target) == pytest.approx(expected)


def test_length_counts_only_the_answer():
    assert get_verifier("up_to_max_length")("<think>" + "w " * 100 + "</think>a b", "2") == 1.0


@pytest.mark.parametrize("name, truth", [
    ("string_matcher", " the . "), ("string_f1", "[]"), ("string_f1", "[1, 2]"),
    ("max_length", "ten"), ("up_to_max_length", "0"),
])
def test_unusable_ground_truths_are_rejected_at_load(name, truth):
    with pytest.raises(ValueError):
        ground_truth_check(name)(truth)
