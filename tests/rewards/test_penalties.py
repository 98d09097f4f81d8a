"""The non-stop penalty: a truncated completion's score is replaced, a finished one is kept."""

import pytest

from rlvr.rewards import apply_non_stop_penalty


@pytest.mark.parametrize("scores, truncated, value, expected", [
    ([1.0, 0.5, 1.0], [False, True, True], -1.0, [1.0, -1.0, -1.0]),
    ([1.0, 0.0], [False, False], 0.0, [1.0, 0.0]),
    ([1.0, 1.0], [True, True], 0.0, [0.0, 0.0]),
    ([], [], 0.0, []),
])
def test_non_stop_penalty(scores, truncated, value, expected):
    assert apply_non_stop_penalty(scores, truncated, value) == expected


def test_input_is_not_mutated():
    scores = [1.0, 1.0]
    apply_non_stop_penalty(scores, [True, False], 0.0)
    assert scores == [1.0, 1.0]


def test_mismatched_lengths_raise():
    with pytest.raises(ValueError, match="2 scores but 1"):
        apply_non_stop_penalty([1.0, 0.0], [True], 0.0)
