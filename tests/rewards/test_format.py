"""The R1 format check, the answer extraction every verifier shares, and the format reward."""

import pytest

from rlvr.rewards.format import format_reward_scores, has_r1_format, strip_thinking


@pytest.mark.parametrize("text, ok", [
    ("<think>2+2 is 4</think><answer>4</answer>", True),
    ("  <think>a\nb</think>\n\n<answer> 4 </answer>\n", True),  # whitespace between parts
    ("<think></think><answer>4</answer>", False),  # empty reasoning
    ("<think>x</think><answer> </answer>", False),  # empty answer
    ("<answer>4</answer>", False),
    ("<think>x</think>4", False),
    ("<think>x</think><answer>4</answer> trailing", False),
    ("preamble <think>x</think><answer>4</answer>", False),
    ("<think>x</think><think>y</think><answer>4</answer>", False),  # tags exactly once
    ("<think>x</think><answer>4</answer><answer>5</answer>", False),
    ("<think>x<answer>4</answer></think>", False),
    ("<think>" * 10_000, False),
])
def test_r1_format(text, ok):
    assert has_r1_format(text) is ok


@pytest.mark.parametrize("text, answer", [
    ("plain answer", "plain answer"),
    ("<think>hidden</think> shown ", "shown"),
    ("<think>a</think><think>b</think>last", "last"),  # after the last </think>
    ("<think>never closed", ""),  # no answer was given
    ("<think>x</think><answer> 42 </answer>", "42"),
    ("<answer>1</answer> then <answer>2</answer>", "2"),
    ("<think><answer>1</answer></think>2", "2"),  # tags inside the thinking do not count
])
def test_strip_thinking(text, answer):
    assert strip_thinking(text) == answer


def test_format_reward_gates_or_adds():
    good, bad = "<think>r</think><answer>a</answer>", "a"
    assert format_reward_scores([1.0, 1.0, 0.0], [good, bad, good], 0.5, additive=False) \
        == [1.0, 0.0, 0.0]
    assert format_reward_scores([1.0, 1.0, 0.0], [good, bad, good], 0.5, additive=True) \
        == [1.5, 1.0, 0.5]
    with pytest.raises(ValueError, match="2 scores but 1"):
        format_reward_scores([1.0, 0.0], [good], 1.0, additive=False)
