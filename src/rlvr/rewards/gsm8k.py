"""`gsm8k` and `last_number`: the last number written in the completion equals the ground truth.

Lenient on purpose: small models rarely follow answer-format instructions (NOTES: SmolLM2 almost
never uses answer tags or a bare final line), so the last number written is taken as the answer.
Numbers are compared as floats within an absolute 1e-6, so `18.00` matches `18` and a
repeating decimal's last digit may differ, but integers only when equal: a relative tolerance
would pay 1000001 for 1,000,000.

Not a symbolic checker: `1/2` in an answer reads as the number 2 here, and a ground truth must
hold exactly one plain number (`1/2` or `1e+16` there is refused at load); use the `math`
verifier for fractions and expressions.
A regex is all this needs; math-verify would be 100x slower for the same answer on plain numbers.

The anti-hedging rule (as for `math`): an answer that offers alternatives scores 0 even if one is
right. Here that is a last number listed among others with an "or" ("3 or 4", "2, 3, or 4"),
or two GSM8K answer lines (`#### N`) with different numbers. Numbers joined by "or" earlier in
the reasoning are no hedge: only the answer's own number is looked at. A plain comma list
("7, 8, 9") is not refused here: the last number is the answer anyway, and "March 3, 2024" is a
date, not a hedge.
"""

from __future__ import annotations

import math
import re

from rlvr.rewards.format import strip_thinking
from rlvr.rewards.math import number_alternatives_cover
from rlvr.rewards.registry import register_verifier

# An optional sign, digits with optional thousands commas, an optional decimal part; or `.5`.
# The sign counts only where it cannot be a binary minus: `5-3` is 5 and 3, `x=-3` is -3.
# `(?!\d)` after each comma group keeps `1,0000` from reading as 1,000 followed by 0.
# A period with no digit after it (the end of a sentence) is not part of the number.
_NUMBER = re.compile(r"(?:(?<![\w)\]])[-\u2212])?(?:\d+(?:,\d{3}(?!\d))*(?:\.\d+)?|\.\d+)")

_ANSWER_LINE = re.compile(r"####\s*(\S+)")  # GSM8K's own answer marker

_ABS_TOL = 1e-6  # and no relative one (see the module docstring)


def parse_last_number(text: str) -> float | None:
    """The last number in `text` as a float, or None if it holds none."""
    last = None
    for last in _NUMBER.finditer(text):
        pass
    if last is None:
        return None
    return float(last.group().replace(",", "").replace("\u2212", "-"))


def is_hedge(text: str) -> bool:
    """Whether `text` offers alternatives for its answer (see the module docstring)."""
    last = None
    for last in _NUMBER.finditer(text):
        pass
    if last is not None and number_alternatives_cover(text, last.start(), with_or=True):
        return True
    answer_lines = {parse_last_number(m.group(1)) for m in _ANSWER_LINE.finditer(text)}
    return len(answer_lines - {None}) > 1


def parse_gold_number(ground_truth: str) -> float:
    """The number a ground truth holds: bare (`72`) or GSM8K's solution ending in `#### 72`.
    ValueError unless exactly one number is there (after the last `####` where there is one):
    taking the last of several would grade `1/2` as 2, `1 000` as 0, `1e+16` as 16 and the
    list `["3", "4"]` as 4, so the row is refused at load instead (all 8,792 GSM8K solutions
    hold one number after `####`)."""
    answer = ground_truth.rpartition("####")[2]
    numbers = _NUMBER.findall(answer)
    if not numbers:
        raise ValueError(f"ground truth {ground_truth[:80]!r} holds no number")
    if len(numbers) > 1:
        raise ValueError(f"ground truth {ground_truth[:80]!r} holds {len(numbers)} numbers "
                         f"({', '.join(numbers[:4])}), not one: a fraction, a list, a number in "
                         "scientific notation or with space-separated thousands is not read "
                         "(use the `math` verifier, or write the number plainly)")
    return float(numbers[0].replace(",", "").replace("\u2212", "-"))


def last_number_answer(completion: str) -> str | None:
    """The answer key maj@n votes with: the last number, written canonically (`18.00`, `18` and
    `+18` all give `18`, `1,000` gives `1000`), so equal numbers vote together; None for a
    hedge."""
    text = strip_thinking(completion)
    answer = parse_last_number(text)
    if answer is None or is_hedge(text):
        return None
    # 12 significant digits: finer than any answer, coarser than float noise; + 0.0 turns -0 into 0
    return f"{answer + 0.0:.12g}"


@register_verifier("gsm8k", ground_truth_check=parse_gold_number,
                   answer_extractor=last_number_answer)
@register_verifier("last_number", ground_truth_check=parse_gold_number,
                   answer_extractor=last_number_answer)
def verify_last_number(completion: str, ground_truth: str) -> float:
    """1.0 if the last number in the completion equals the ground truth's number, else 0.0."""
    gold = parse_gold_number(ground_truth)  # first, so a bad ground truth is an error every time
    text = strip_thinking(completion)  # a number thought is not answered
    answer = parse_last_number(text)
    if answer is None or is_hedge(text):
        return 0.0
    return 1.0 if math.isclose(answer, gold, rel_tol=0.0, abs_tol=_ABS_TOL) else 0.0
