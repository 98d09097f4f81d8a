"""`math`: answer extraction (ours) and equivalence (math-verify's), table-driven."""

import threading

import pytest

from rlvr.rewards import get_verifier
from rlvr.rewards.math import extract_candidate, gold_latex, last_boxed


@pytest.mark.parametrize("completion, truth, expected", [
    ("So the answer is \\boxed{\\frac12}.", "0.5", 1.0),  # \frac12 vs 0.5
    ("\\boxed{0.5}", "\\frac{1}{2}", 1.0),
    ("\\boxed{\\frac{1}{2}}", "\\frac{1}{2}", 1.0),  # nested braces kept whole
    ("\\boxed{\\frac{\\sqrt{2}}{2}}", "\\frac{1}{\\sqrt{2}}", 1.0),
    ("\\boxed{3}", "4", 0.0),
    ("first \\boxed{4}, then corrected: \\boxed{3}", "4", 0.0),  # the last box counts
    ("The final answer is 7", "7", 1.0),
    ("The final answer is: $7$.", "7", 1.0),
    ("The final answer is 8.\nCheck: 7 = 7", "7", 0.0),  # "final answer is" beats later text
    ("we get $x = 2$ and so $5$", "5", 1.0),  # the last $...$
    ("\\boxed{10\\text{ cm}}", "10", 1.0),  # units
    ("The final answer is 10 cm", "10", 1.0),
    ("\\boxed{90^\\circ}", "90", 1.0),
    ("\\boxed{1,000}", "1000", 1.0),
    ("\\boxed{x^2+1}", "1+x^2", 1.0),
    ("\\boxed{(1, 2)}", "(1,2)", 1.0),
    ("I think it is 12", "12", 1.0),  # no box, no $: math-verify searches the whole text
    ("I have no idea", "12", 0.0),
    # An unclosed box is no boxed answer: the whole text goes to math-verify, which reads 1/2.
    ("\\boxed{\\frac{1}{2}", "\\frac{1}{2}", 1.0),
])
def test_math_verifier(completion, truth, expected):
    assert get_verifier("math")(completion, truth) == expected


@pytest.mark.parametrize("text, boxed", [
    ("a \\boxed{1} b \\boxed{\\frac{a}{b}}", "\\frac{a}{b}"),
    ("\\boxed{{{x}}}", "{{x}}"),
    ("\\boxed{\\frac{1}{2}", None),
    ("no box", None),
])
def test_last_boxed(text, boxed):
    assert last_boxed(text) == boxed


@pytest.mark.parametrize("completion, candidate", [
    ("so \\boxed{3}.", "\\boxed{3}"),
    ("The Final Answer is 7.", "7"),
    ("we get $x$ and $5$ done", "$5$"),
    ("plain 42", "plain 42"),
])
def test_extract_candidate(completion, candidate):
    assert extract_candidate(completion) == candidate


@pytest.mark.parametrize("truth, latex", [
    ("\\frac{1}{2}", "$\\frac{1}{2}$"),
    ("\\$18", "$\\$18$"),  # an escaped dollar is not a delimiter
    ("$5$", "$5$"),
    ("\\boxed{5}", "\\boxed{5}"),
])
def test_gold_latex(truth, latex):
    assert gold_latex(truth) == latex


def test_unparseable_ground_truth_raises():
    with pytest.raises(ValueError, match="cannot parse the ground truth"):
        get_verifier("math")("\\boxed{1}", "")


def test_works_off_the_main_thread():
    # math-verify's own signal-based timeouts would raise ValueError here; ours are disabled.
    result = []
    thread = threading.Thread(target=lambda: result.append(get_verifier("math")("\\boxed{2}", "2")))
    thread.start()
    thread.join()
    assert result == [1.0]


@pytest.mark.parametrize("completion, truth, expected", [
    ("So the answer is \\boxed{\\frac12}.", "0.5", 1.0),
    ("The final answer is $7$.", "7", 1.0),
    ("we get $x = 2$ and so $5$", "5", 0.0),  # `math` pays for the last $...$; strict does not
    ("I think it is 12", "12", 0.0),  # no commitment, no reward
    ("\\boxed{\\frac{1}{2}", "\\frac{1}{2}", 0.0),  # an unclosed box is no answer
    ("<think>\\boxed{3}</think> \\boxed{4}", "4", 1.0),
    ("<think>\\boxed{4}</think> so it is 3", "4", 0.0),  # boxed only while thinking
])
def test_strict_math_verifier(completion, truth, expected):
    assert get_verifier("strict_math")(completion, truth) == expected


def test_math_ignores_answers_given_only_while_thinking():
    assert get_verifier("math")("<think>\\boxed{4}</think>The answer is \\boxed{5}", "4") == 0.0
    assert get_verifier("math")("<think>it is \\boxed{4}", "4") == 0.0  # never answered
