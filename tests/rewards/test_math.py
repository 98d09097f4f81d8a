"""`math` and `strict_math`: Math-Verify picks and compares the answer; rlvr grades the final one.

Math-Verify's own test cases are in `conformance/`; these pin rlvr's rules and the issue-35 cases
that rlvr's former hand-written extraction got wrong (each marked "was wrong")."""

import threading

import pytest

from rlvr.rewards import get_verifier
from rlvr.rewards.math import gold_latex, last_boxed


@pytest.mark.parametrize("completion, truth, expected", [
    ("So the answer is \\boxed{\\frac12}.", "0.5", 1.0),  # \frac12 vs 0.5
    ("\\boxed{0.5}", "\\frac{1}{2}", 1.0),
    ("\\boxed{\\frac{1}{2}}", "\\frac{1}{2}", 1.0),  # nested braces kept whole
    ("\\boxed{\\frac{\\sqrt{2}}{2}}", "\\frac{1}{\\sqrt{2}}", 1.0),
    ("\\boxed{3}", "4", 0.0),
    ("The final answer is 7", "7", 1.0),
    ("The final answer is: $7$.", "7", 1.0),
    ("we get $x = 2$ and so $5$", "5", 1.0),  # the last expression
    ("\\boxed{10\\text{ cm}}", "10", 1.0),  # units
    ("The final answer is 10 cm", "10", 1.0),
    ("\\boxed{90^\\circ}", "90", 1.0),
    ("\\boxed{1,000}", "1000", 1.0),
    ("\\boxed{x^2+1}", "1+x^2", 1.0),
    ("\\boxed{(1, 2)}", "(1,2)", 1.0),
    ("I think it is 12", "12", 1.0),  # no box, no $: Math-Verify takes the last number
    ("I have no idea", "12", 0.0),
    # An unclosed box is no boxed answer: Math-Verify reads what follows it.
    ("\\boxed{\\frac{1}{2}", "\\frac{1}{2}", 1.0),
])
def test_math_verifier(completion, truth, expected):
    assert get_verifier("math")(completion, truth) == expected


@pytest.mark.parametrize("completion, truth", [
    # The number comes after a variable or formula in $...$ (was graded as `n`, `t = ...`, `f(x)`).
    ("Final Answer: The largest $n$ is 34.", "34"),
    ("Since Rod started 5 hours earlier, $t = s+5 = 3+5 = 8$.", "8"),
    ("The number of points in the domain of $f(x)$ is 19.", "19"),
    # Boxes given while reasoning do not beat a later final answer (was the box: 255).
    ("the interest is $\\boxed{200}$, then $\\boxed{255}$. Adding the interest over the whole "
     "year to the deposit we started with, the account holds $10,455 at the end. "
     "Final Answer: The final answer is $10,455$. I hope it is correct.", "10455"),
    # "final answer is" takes the value, not the rest of the line (was its last number, 9).
    ("The final answer is 8, not 9 as I first thought", "8"),
    # Several boxes that together are the answer (was the last box only: 3).
    ("\\boxed{1}, \\boxed{2}, \\boxed{3}", "\\{1,2,3\\}"),
    ("\\boxed{1} and \\boxed{2} and \\boxed{3}", "1,2,3"),
    ("The solutions are \\[ \\boxed{-2} \\quad \\text{and} \\quad \\boxed{1}. \\]", "1, -2"),
])
def test_math_reads_the_answer_math_verify_reads(completion, truth):
    assert get_verifier("math")(completion, truth) == 1.0


@pytest.mark.parametrize("completion, truth", [
    ("The final answer is 3 or 4.", "3"),  # Math-Verify alone reads 3 here
    ("The final answer is 7, 8, 9.", "7"),  # and 7 here
    ("The answer is 2, 3, or 4.", "2"),
    ("It could be 7, 8, 9, 10 or 11.", "11"),
    ("It is 3 or 4", "4"),  # no offer: the number taken is one of two alternatives
    ("\\boxed{3} or \\boxed{4}", "4"),  # one offer, the set {3, 4}: no single value
    ("\\boxed{3}\\boxed{4}\\boxed{5}\\boxed{6}", "5"),
])
def test_math_gives_a_hedge_nothing(completion, truth):
    assert get_verifier("math")(completion, truth) == 0.0
    assert get_verifier("strict_math")(completion, truth) == 0.0


@pytest.mark.parametrize("completion, final, earlier", [
    ("first \\boxed{4}, but wait, actually \\boxed{5}", "5", "4"),  # was 0 against 5
    ("The answer is \\boxed{3}. Or maybe it is \\boxed{4}.", "4", "3"),
    ("\\boxed{3}. Hmm maybe \\boxed{4}.", "4", "3"),
    ("The answer is \\boxed{3}.\nThe final answer is 4.", "4", "3"),
    ("It is \\boxed{7}, or maybe \\boxed{8}.", "8", "7"),
])
def test_the_final_answer_is_graded_so_self_correction_pays_and_hedging_cannot_beat_committing(
        completion, final, earlier):
    """A self-corrected answer ("first \\boxed{4}, but wait, actually \\boxed{5}" against 5)
    scored 0: the two closing offers were a hedge, and Math-Verify alone reads the boxes as the set
    {4, 5}. Math-Verify and open-instruct grade the final answer (open-instruct's
    `MathVerifier.__call__` takes `last_boxed_only_string`); so does rlvr now. Grading only the
    last offer, a hedge pays exactly what committing to its last candidate pays, never more: the
    earlier candidates earn nothing."""
    for verifier in ("math", "strict_math"):
        assert get_verifier(verifier)(completion, final) == 1.0
        assert get_verifier(verifier)(completion, earlier) == 0.0


def test_the_same_answer_offered_twice_is_no_hedge():
    assert get_verifier("math")("The answer is $\\frac12$, that is \\boxed{0.5}.", "1/2") == 1.0
    assert get_verifier("math")("\\boxed{4}\n\nFinal Answer: The final answer is 4.", "4") == 1.0


def test_an_earlier_box_followed_by_reasoning_is_a_step_not_an_offer():
    text = ("First \\boxed{3} apples, then we add the two baskets that the farmer brought from the "
            "market in the morning, so the total is \\boxed{5}.")
    from rlvr.rewards.math import closing_offers

    assert [o.text for o in closing_offers(text)] == ["\\boxed{5}"]
    assert get_verifier("math")(text, "5") == 1.0


def test_numbers_in_the_reasoning_joined_by_or_are_no_hedge():
    text = "Since n must be 2 or 3 and n is odd, the answer is \\boxed{3}."
    assert get_verifier("math")(text, "3") == 1.0
    assert get_verifier("math")("n is 2 or 3. As n is odd, n = 3.", "3") == 1.0
    assert get_verifier("math")("The final answer is 12, since 3 and 4 make 7.", "12") == 1.0
    assert get_verifier("math")("The final answer is 1,000.", "1000") == 1.0  # one number
    assert get_verifier("math")("The final answer is $(1, 2)$.", "(1,2)") == 1.0  # a point


@pytest.mark.parametrize("text, groups", [
    ("\\boxed{1}, \\boxed{2}", ["\\boxed{1}, \\boxed{2}"]),
    ("\\boxed{1}   \\boxed{2}", ["\\boxed{1}   \\boxed{2}"]),  # under 10 characters apart
    ("\\boxed{3}. Hmm maybe \\boxed{4}.", ["\\boxed{3}", "\\boxed{4}"]),
    ("\\boxed{4}, but wait, actually \\boxed{5}", ["\\boxed{4}", "\\boxed{5}"]),  # words
    ("\\boxed{(3, 3)} \\text{ for part (a) and } \\boxed{(1, 1)}",
     ["\\boxed{(3, 3)} \\text{ for part (a) and } \\boxed{(1, 1)}"]),  # LaTeX text: a set
    ("\\boxed{2} is the answer, and again \\boxed{2}", ["\\boxed{2}", "\\boxed{2}"]),  # same
    ("\\boxed{\\frac{1}{2}", []),  # unclosed
    ("\\fbox{7}", ["\\fbox{7}"]),
])
def test_box_groups_follow_math_verify(text, groups):
    from rlvr.rewards.math import box_groups

    assert [g.text for g in box_groups(text)] == groups


def test_a_phrase_and_its_box_are_one_offer():
    from rlvr.rewards.math import answer_offers

    text = "So the final answer is $\\boxed{5}$. Done."
    assert [o.text for o in answer_offers(text)] == ["final answer is $\\boxed{5}$."]
    assert answer_offers("To find the answer, note that the sum is 12.") == []
    assert answer_offers("The answer is below.") == []


@pytest.mark.parametrize("sentence, offers", [
    ("3 or 4", True), ("2, 3, or 4", True), ("-1 or 1.5", True), ("7, 8, 9", True),
    ("3 or more", False), ("x or y", False), ("$3$ or $4$", False),  # LaTeX: Math-Verify's set
    ("1,000", False), ("(1, 2)", False), ("[0, 1)", False),
])
def test_number_alternatives(sentence, offers):
    from rlvr.rewards.math import offers_number_alternatives

    assert offers_number_alternatives(sentence) is offers


@pytest.mark.parametrize("text, boxed", [
    ("a \\boxed{1} b \\boxed{\\frac{a}{b}}", "\\frac{a}{b}"),
    ("\\boxed{{{x}}}", "{{x}}"),
    ("\\boxed{\\frac{1}{2}", None),
    ("\\boxed{1} then \\boxed{\\frac{1}{2}", None),  # the last box is cut off
    ("no box", None),
])
def test_last_boxed(text, boxed):
    assert last_boxed(text) == boxed


@pytest.mark.parametrize("truth, latex", [
    ("\\frac{1}{2}", "$\\frac{1}{2}$"),
    ("\\$18", "$\\$18$"),  # an escaped dollar is not a delimiter
    ("$5$", "$5$"),
    ("\\boxed{5}", "\\boxed{5}"),
    ("\n\\begin{pmatrix} 1 \\\\\n 2 \\end{pmatrix}\n",  # line breaks: one space each
     "$\\begin{pmatrix} 1 \\\\ 2 \\end{pmatrix}$"),
])
def test_gold_latex(truth, latex):
    assert gold_latex(truth) == latex


def test_unparseable_ground_truth_raises():
    with pytest.raises(ValueError, match="cannot parse the ground truth"):
        get_verifier("math")("\\boxed{1}", "\\text{}")


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
    ("Answer: 7", "7", 1.0),
    ("we get $x = 2$ and so $5$", "5", 0.0),  # `math` pays for the last expression; strict not
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
    assert get_verifier("math")("<think>so \\boxed{4}</think>I am not sure.", "4") == 0.0
