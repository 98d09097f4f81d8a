"""Answer extractors: the key maj@n votes with, registered with the verifier that judges it."""

import pytest

from rlvr.rewards import VERIFIERS, answer_extractor, register_verifier
from rlvr.rewards.gsm8k import last_number_answer
from rlvr.rewards.math import math_answer, strict_math_answer
from rlvr.rewards.string_match import normalized_answer


def test_built_in_verifiers_that_extract_answers():
    have = {name for name, entry in VERIFIERS.items() if entry.answer_extractor is not None}
    assert {"gsm8k", "last_number", "math", "strict_math", "string_matcher",
            "string_f1"} <= have
    for judged_as_a_whole in ("ifeval", "code", "max_length", "up_to_max_length"):
        assert answer_extractor(judged_as_a_whole) is None
    assert answer_extractor("no_such_verifier") is None


@pytest.mark.parametrize("text, key", [
    ("so 18.00 in all", "18"), ("18", "18"), ("it is 1,000 apples", "1000"), ("-0", "0"),
    ("x = -3.50.", "-3.5"), ("<think>12</think> 13", "13"), ("no number", None),
    ("<think>unfinished 4", None),
])
def test_last_number_answer(text, key):
    assert last_number_answer(text) == key


@pytest.mark.parametrize("text, key", [
    (r"so \boxed{\dfrac{1}{2}}.", r"\frac{1}{2}"),
    (r"\boxed{ \frac{1}{2} }", r"\frac{1}{2}"),
    (r"The final answer is $\left(1, 2\right)$.", "(1,2)"),
    (r"angles: $30$ and $45^\circ$", "45"),
    (r"\boxed{\rightarrow}", r"\rightarrow"),  # \right is only dropped as a whole command
    ("just 42", "42"),  # no offer: the last expression, as `math` grades it
    (r"\boxed{3", "3"),  # cut off: no box, `math` grades the 3 after it
    (r"The largest $n$ is 34.", "34"),  # not `n`
    (r"so $t = s+5 = 3+5 = 8$", "8"),
    (r"\boxed{1}, \boxed{2}", "1,2"),  # one offer of two boxes
    (r"\boxed{3}. Hmm maybe \boxed{4}.", "4"),  # the final answer, as `math` grades it
    (r"first \boxed{4}, but wait, actually \boxed{5}", "5"),  # a self-correction
    ("no answer here", None),
])
def test_math_answer(text, key):
    assert math_answer(text) == key


def test_strict_math_answer_only_counts_committed_answers():
    assert strict_math_answer(r"we get $7$") is None
    assert strict_math_answer(r"so \boxed{7}") == "7"


def test_normalized_answer():
    assert normalized_answer("The Eiffel Tower!") == "eiffel tower"
    assert normalized_answer("<answer> the </answer>") is None


def test_a_plugin_verifier_can_register_an_extractor():
    @register_verifier("test_upper_extract", answer_extractor=lambda text: text.upper() or None)
    def upper(completion, ground_truth):
        return float(completion.upper() == ground_truth)

    assert answer_extractor("test_upper_extract")("ab") == "AB"
