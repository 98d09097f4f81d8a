"""`math` and `strict_math`: the completion's final answer is mathematically equal to the ground
truth, by Math-Verify.

What the answer is, and whether two answers are equal, are both Math-Verify's decisions: it is
given the whole answer part of the completion (`strip_thinking`) and picks the answer as its own
tests expect, with its default extraction (`LatexExtractionConfig()`, `ExprExtractionConfig()`):
a `\\boxed{}` (neighbouring boxes joined by "and", "or" or commas are one set-valued answer, so
`\\boxed{1}, \\boxed{2}, \\boxed{3}` is {1, 2, 3}), or a "final answer is ..." phrase, whichever
comes last; failing both, an "answer: ..." phrase; failing that, the last LaTeX expression or
number in the text, so "The largest $n$ is 34." answers 34, and `$t = s+5 = 3+5 = 8$` answers 8.
A box given earlier in the reasoning does not beat a later final answer.

What rlvr adds is one rule, the final-answer rule: only the answer's last offer is graded, so a
self-correction ("first \\boxed{4}, but wait, actually \\boxed{5}") is paid for its final
answer, as Math-Verify and open-instruct (`last_boxed_only_string`) grade it, and a hedge cannot
beat committing: "\\boxed{3}. Hmm maybe \\boxed{4}" pays exactly what committing to 4 pays.
rlvr finds the answer's *offers* itself: box groups and "(final) answer is/:" phrases
(`answer_offers`). Boxes Math-Verify reads as one set (close, joined by "and", "or" or commas)
are one offer, unless words stand between them ("\\boxed{4}, but wait, actually \\boxed{5}" is
two offers; Math-Verify alone reads the set {4, 5}). When several offers close the answer
(fewer than `_SAME_ANSWER_WORDS` words apart, `closing_offers`), the last is graded; a lone
offer is graded as Math-Verify reads the whole answer. What stays a hedge, and scores 0: a list
of plain numbers in the graded offer's phrase ("The final answer is 7, 8, 9", "3 or 4", which
Math-Verify would read as their first number), or, with no offer, around the number
Math-Verify took; a set of boxes equals no single value. LaTeX lists are not hedges:
"$x = 3$ or $x = -2$" is the set {3, -2}, the answer to a quadratic.

`strict_math` pays only an answer the completion commits to: without a box or an answer phrase
it scores 0, and then it grades the closing offers only.

Time: Math-Verify's own limits use `signal.alarm`, which raises off the main thread, so they are
switched off here (`parsing_timeout=None`, `timeout_seconds=None`). This module is therefore
unbounded in time: the scorer runs it in a worker process that it kills on overrun
(`RewardScorer`, `rewards.timeout_s`). Math-Verify (with sympy, about 1 s) is imported on first
use, so importing this module stays cheap.
"""

from __future__ import annotations

import json
import logging
import re
from dataclasses import dataclass
from functools import lru_cache

from rlvr.rewards.format import strip_thinking
from rlvr.rewards.registry import register_verifier

# math-verify warns once per process that its timeouts are disabled; that is deliberate here.
logging.getLogger("math_verify").setLevel(logging.ERROR)

_BOXES = re.compile(r"\\(?:boxed|fbox)\s*\{")
_UNESCAPED_DOLLAR = re.compile(r"(?<!\\)\$")
# Math-Verify's rule for boxes that answer together (latex2sympy2_extended's
# `extract_boxed_content`): fewer than 10 characters apart, or fewer than 70 with "and", "or",
# a comma or a semicolon between them and different contents.
_BOX_SEPARATOR = re.compile(r"\b(?:and|or)\b|[,;]")
# "The final answer is", "Answer:", "the answer to part (b) is": no comma or full stop between
# "answer" and "is"/":", so "to find the answer, note that the sum is 12" is no offer; and a
# value must follow (a digit, a sign, LaTeX or a bracket), so "the answer is below" is none.
_ANSWER_PHRASE = re.compile(
    r"(?i:\b(?:final\s+)?answer\b)[^\n.,;:]{0,40}?(?:\bis\b|:)[\s*]*(?=[$\\\-\u2212\d(\[{])")
_SENTENCE_END = re.compile(r"\.(?=\s|$)|\n")
_PHRASE_CHARS = 300  # an answer phrase's value ends by then
# Plain numbers listed as alternatives: "3 or 4", "7, 8, 9", "2, 3, or 5" (Math-Verify reads the
# first and pays it). Numbers are taken whole (possessive), so "1,000" is one number, not a list;
# one inside brackets is a coordinate or an interval ("(1, 2)", "[0, 1)"), not a list; LaTeX
# lists ("$3$ or $4$", "$7, 8$") are left to Math-Verify, which reads them as sets.
_NUMBER = r"[-\u2212]?\d++(?:,\d{3}(?!\d))*+(?:\.\d+)?+"
_LIST_JOIN = r"(?:\s*,\s*(?:(?:or|and)\s+)?|\s+(?:or|and)\s+)"
_NUMBER_ALTERNATIVES = re.compile(rf"(?<![\w$\\.(\[{{,]){_NUMBER}(?:{_LIST_JOIN}{_NUMBER})+"
                                  rf"(?![\w$)\]}}])")
_OR = re.compile(r"\bor\b")
_WORD = re.compile(r"[A-Za-z]{2,}")
# Offers with fewer words than this between them are one closing answer (two of them differing
# is a hedge); more words between, and the earlier one was a step of the reasoning.
_SAME_ANSWER_WORDS = 12
# Stripped before asking whether words stand between boxes: LaTeX text and commands, so
# `\\quad \\text{and} \\quad` and `\\text{ for part (a) and }` join a set as "and" does.
_LATEX_COMMAND = re.compile(r"\\text\s*\{[^{}]*\}|\\[A-Za-z]+")
_MAX_CLOSING = 16  # the most closing offers looked at (each costs a Math-Verify parse)


@dataclass(frozen=True)
class Offer:
    """A place where the answer offers a final value: a box group or an answer phrase."""

    start: int
    end: int
    text: str


def last_boxed(text: str) -> str | None:
    """The content of the last `\\boxed{...}` (nested braces kept); None if absent or unclosed."""
    boxes = _boxes(text)
    if not boxes or boxes[-1][0] < text.rfind("\\boxed"):
        return None  # the last box is unbalanced: the answer was cut off, there is nothing to grade
    start, end = boxes[-1]
    return text[text.index("{", start) + 1:end - 1]


def boxed_contents(text: str) -> list[str]:
    """The content of each closed, top-level `\\boxed{...}` / `\\fbox{...}` of `text`, in order."""
    return [text[text.index("{", start) + 1:end - 1] for start, end in _boxes(text)]


def box_gaps(text: str) -> list[str]:
    """The text between each two neighbouring top-level boxes of `text` ("$ or $x = ")."""
    boxes = _boxes(text)
    return [text[before[1]:after[0]] for before, after in zip(boxes, boxes[1:])]


def _boxes(text: str) -> list[tuple[int, int]]:
    """(start, end) of each closed, top-level `\\boxed{...}` / `\\fbox{...}`."""
    found = []
    position = 0
    while (opening := _BOXES.search(text, position)) is not None:
        end = _closing_brace(text, opening.end() - 1)
        if end is None:
            break  # unclosed: nothing after it is closed at top level either
        found.append((opening.start(), end + 1))
        position = end + 1
    return found


def _closing_brace(text: str, opening: int) -> int | None:
    depth = 0
    for i in range(opening, len(text)):
        if text[i] == "{":
            depth += 1
        elif text[i] == "}":
            depth -= 1
            if depth == 0:
                return i
    return None


def box_groups(text: str) -> list[Offer]:
    """The boxes of `text`, neighbours that answer together (Math-Verify's rule) merged into one
    offer: `\\boxed{1}, \\boxed{2}` is one offer, `\\boxed{3} ... later ... \\boxed{4}` two."""
    groups: list[list[tuple[int, int]]] = []
    for box in _boxes(text):
        if groups and _same_group(text, groups[-1][-1], box):
            groups[-1].append(box)
        else:
            groups.append([box])
    return [Offer(g[0][0], g[-1][1], text[g[0][0]:g[-1][1]]) for g in groups]


def _same_group(text: str, before: tuple[int, int], after: tuple[int, int]) -> bool:
    between = text[before[1]:after[0]]
    words = _WORD.findall(_LATEX_COMMAND.sub("", between))
    if any(word.lower() not in ("and", "or") for word in words):
        return False  # words between ("but wait, actually"): a second answer, not a set
    if len(between) < 10:
        return True
    return (len(between) < 70 and text[slice(*before)] != text[slice(*after)]
            and _BOX_SEPARATOR.search(between) is not None)


def answer_phrases(text: str) -> list[Offer]:
    """Each "(final) answer is/:" phrase followed by a value, to the end of its sentence (at most
    `_PHRASE_CHARS` on: "answer: 1 " * 20000 with no full stop must not cost a scan per phrase)."""
    offers = []
    for phrase in _ANSWER_PHRASE.finditer(text):
        limit = min(len(text), phrase.end() + _PHRASE_CHARS)
        end = _SENTENCE_END.search(text, phrase.end(), limit)
        stop = end.end() if end else limit
        offers.append(Offer(phrase.start(), stop, text[phrase.start():stop]))
    return offers


def answer_offers(text: str) -> list[Offer]:
    """Box groups and answer phrases in order; a phrase and the box it holds ("the final answer
    is $\\boxed{5}$") are one offer."""
    spans: list[list[int]] = []
    for offer in sorted(box_groups(text) + answer_phrases(text), key=lambda o: o.start):
        if spans and offer.start < spans[-1][1]:  # overlapping: the same offer
            spans[-1][1] = max(spans[-1][1], offer.end)
        else:
            spans.append([offer.start, offer.end])
    return [Offer(start, end, text[start:end]) for start, end in spans]


def closing_offers(text: str) -> list[Offer]:
    """The last offer and those before it that are fewer than `_SAME_ANSWER_WORDS` words apart."""
    offers = answer_offers(text)
    if not offers:
        return []
    closing = [offers[-1]]  # newest first while collecting
    for offer in reversed(offers[:-1]):
        if len(closing) == _MAX_CLOSING:
            break  # that many answers offered together are a hedge already
        between = text[offer.end:closing[-1].start]
        if len(_WORD.findall(between)) >= _SAME_ANSWER_WORDS:
            break
        closing.append(offer)
    return closing[::-1]


def offers_number_alternatives(text: str) -> bool:
    """Whether `text` lists plain numbers as alternatives ("3 or 4", "7, 8, 9")."""
    return _NUMBER_ALTERNATIVES.search(text) is not None


def _phrase_lists_numbers(offer_text: str) -> bool:
    """Whether an offer's answer phrase gives a list of plain numbers as its value ("The final
    answer is 7, 8, 9"); numbers later in its sentence ("12, since 3 and 4 ...") do not count."""
    phrase = _ANSWER_PHRASE.search(offer_text)
    return phrase is not None and _NUMBER_ALTERNATIVES.match(offer_text, phrase.end()) is not None


def number_alternatives_cover(text: str, position: int, with_or: bool = False) -> bool:
    """Whether `position` of `text` lies in a list of plain numbers ("3 or 4", "7, 8, 9"; with
    `with_or`, only a list that says "or")."""
    return any(m.start() <= position < m.end() and (not with_or or _OR.search(m.group()))
               for m in _NUMBER_ALTERNATIVES.finditer(text))


def gold_latex(ground_truth: str) -> str:
    """A ground truth in the form math-verify parses: whitespace runs made one space (it reads
    only the last number of a `$...$` that spans lines: MATH's `\\n\\begin{pmatrix} 0 & 3 \\\\ 0
    & -1 \\end{pmatrix}\\n` was -1), and bare LaTeX wrapped in `$...$`."""
    ground_truth = " ".join(ground_truth.split())
    if "\\boxed" in ground_truth or _UNESCAPED_DOLLAR.search(ground_truth):
        return ground_truth  # already delimited
    return f"${ground_truth}$"


def check_ground_truth(ground_truth: str) -> str:
    """The load-time check of a `math` ground truth (cheap: no Math-Verify): ValueError for one
    that holds nothing (a MATH solution's `\\boxed{}` gives one) or that is a JSON list
    other than a pair of numbers. `["3", "4"]` is a list of answers written by a reader, which
    Math-Verify would read as an interval; `[0, 25]` is MATH's closed interval and stays."""
    if not ground_truth.strip():
        raise ValueError("the math ground truth is empty")
    if ground_truth.lstrip().startswith("["):
        try:
            value = json.loads(ground_truth)
        except (ValueError, RecursionError):
            return ground_truth  # LaTeX such as "[0, 1)": not JSON
        is_interval = (isinstance(value, list) and len(value) == 2
                       and all(type(v) in (int, float) for v in value))
        if isinstance(value, list) and not is_interval:
            raise ValueError(f"the math ground truth {ground_truth[:80]!r} is a JSON list: "
                             "math grades one answer (a set is LaTeX: \"3, 4\")")
    return ground_truth


@lru_cache(maxsize=1)
def _extraction_config() -> tuple:
    from math_verify import ExprExtractionConfig, LatexExtractionConfig  # lazy: sympy, ~1 s

    return LatexExtractionConfig(), ExprExtractionConfig()


def _parse(text: str) -> list:
    from math_verify import parse

    return parse(text, _extraction_config(), parsing_timeout=None)


def _equal(gold: list, answer: list) -> bool:
    from math_verify import verify

    return bool(answer) and verify(gold, answer, timeout_seconds=None)


def _parse_gold(ground_truth: str) -> list:
    # parse/verify swallow their own errors (returning [] / False) unless asked to raise; an
    # unparseable candidate is a wrong answer, but an unparseable ground truth is a data bug.
    gold = _parse(gold_latex(check_ground_truth(ground_truth)))
    if not gold:
        raise ValueError(f"math-verify cannot parse the ground truth {ground_truth[:80]!r}")
    return gold


def score_math(completion: str, ground_truth: str, committed_only: bool = False) -> float:
    """1.0 if the completion's final answer equals the ground truth and is no hedge, else 0.0."""
    gold = _parse_gold(ground_truth)  # first, so a bad ground truth is an error every time
    answer = strip_thinking(completion)  # an answer given only while thinking is not given
    closing = closing_offers(answer)
    if closing and _phrase_lists_numbers(closing[-1].text):
        return 0.0  # "The final answer is 7, 8, 9": Math-Verify would pay the first
    if committed_only or len(closing) > 1:
        # The final offer only: an earlier one is corrected ("first \\boxed{4}, but wait,
        # actually \\boxed{5}"), as Math-Verify and open-instruct grade the final answer.
        return 1.0 if closing and _equal(gold, _parse(closing[-1].text)) else 0.0
    picked = _parse(answer)
    if not closing and len(picked) > 1:  # no offer: is the number Math-Verify took one of several?
        where = answer.rfind(str(picked[-1]))
        if where >= 0 and number_alternatives_cover(answer, where):
            return 0.0
    return 1.0 if _equal(gold, picked) else 0.0


# LaTeX that changes how an answer looks, not what it is: removed before answers are compared.
_COSMETIC = re.compile(r"\\(?:left|right)(?![a-zA-Z])|\\[!,;: ]|\\displaystyle|\^\{?\\circ\}?|\s+")
# What the vote key reads when there is no offer: LaTeX spans and plain numbers.
# Bounded lengths keep it linear on "\\(" * 50000 (the extractor runs in the trainer's process).
_LATEX_SPAN = re.compile(r"(?<!\\)\$\$?([^$]{1,2000}?)(?<!\\)\$\$?|\\\(([^\n]{1,500}?)\\\)"
                         r"|\\\[(.{1,2000}?)\\\]", re.DOTALL)
_TAIL_CHARS = 4000  # how far back from the end the vote key looks for the last expression
_PLAIN_NUMBER = re.compile(rf"(?<![\w.]){_NUMBER}(?![\w])")
_PHRASE_VALUE = re.compile(r"^.*?(?:\bis\b|:)[\s*]*(.*?)[\s.]*$", re.DOTALL | re.IGNORECASE)


def normalize_answer_text(answer: str) -> str:
    """A light, string-only canonical form of an extracted answer for maj@n votes: spacing,
    `\\left`/`\\right`, thin spaces, degree marks, `$`, a trailing period and `\\dfrac` /
    `\\tfrac` (as `\\frac`) go. Not an equivalence test (math-verify's job, too slow and
    unbounded to run in the trainer's process): `0.5` and `\\frac12` still vote apart."""
    text = answer.strip().strip("$").rstrip(".")
    text = text.replace("\\dfrac", "\\frac").replace("\\tfrac", "\\frac")
    return _COSMETIC.sub("", text)


def _offer_value(offer: Offer) -> str:
    """The answer an offer gives, as text: the boxes' contents, or what follows "is"/":"."""
    boxes = _boxes(offer.text)
    if boxes:
        return ",".join(offer.text[offer.text.index("{", s) + 1:e - 1] for s, e in boxes)
    value = _PHRASE_VALUE.match(offer.text)
    return value.group(1) if value else offer.text


def _rightmost_value(text: str) -> str | None:
    """A cheap stand-in for Math-Verify's last-expression rule: the rightmost LaTeX span (its
    part after the last "=") or plain number, whichever ends later."""
    tail_start = max(0, len(text) - _TAIL_CHARS)  # the answer is at the end; keeps it cheap
    spans = [(m.end(), next(g for g in m.groups() if g is not None))
             for m in _LATEX_SPAN.finditer(text, tail_start)]
    spans += [(m.end(), m.group()) for m in _PLAIN_NUMBER.finditer(text, tail_start)]
    if not spans:
        return None
    return max(spans, key=lambda s: s[0])[1].rpartition("=")[2]


def _vote_key(value: str | None) -> str | None:
    if value is None:
        return None
    return normalize_answer_text(value) or None


def math_answer(completion: str) -> str | None:
    """The answer key maj@n votes with, read as `math` reads it without Math-Verify (which is
    too slow for the trainer's process): the last offer's value (the final answer, as `math`
    grades it), else the rightmost LaTeX expression or number; normalised."""
    text = strip_thinking(completion)
    offers = answer_offers(text)
    if not offers:
        return _vote_key(_rightmost_value(text))
    return _vote_key(_offer_value(offers[-1]))


def strict_math_answer(completion: str) -> str | None:
    """`math_answer` for `strict_math`: only an offered (boxed or phrased) answer."""
    offers = answer_offers(strip_thinking(completion))
    return _vote_key(_offer_value(offers[-1])) if offers else None


@register_verifier("math", ground_truth_check=check_ground_truth, answer_extractor=math_answer)
def verify_math(completion: str, ground_truth: str) -> float:
    """1.0 if the answer equals the ground truth under Math-Verify and is no hedge, else 0.0."""
    return score_math(completion, ground_truth)


@register_verifier("strict_math", ground_truth_check=check_ground_truth,
                   answer_extractor=strict_math_answer)
def verify_strict_math(completion: str, ground_truth: str) -> float:
    """`math`, but only a boxed or "answer is" answer counts: a model cannot be paid for a
    right number it merely wrote last."""
    return score_math(completion, ground_truth, committed_only=True)
