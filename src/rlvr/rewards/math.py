"""`math`: the completion's final answer is mathematically equal to the ground truth (math-verify).

Which part of the completion is the answer is decided here, in order: the last `\\boxed{...}`
(balanced braces, so `\\boxed{\\frac{1}{2}}` is whole), else the text after "final answer is",
else the last `$...$`, else the whole completion (math-verify then finds the last expression).
Whether two answers are equal (`\\frac12` vs `0.5`, `10\\text{ cm}` vs `10`) is math-verify's
job, not ours.

math-verify's own time limits use `signal.alarm`, which raises off the main thread; they are
disabled here. This function is therefore unbounded in time: call it through `RewardScorer`,
which runs it in a worker process it kills on overrun. math-verify (with sympy, about 1 s) is
imported on first use, so importing this module stays cheap.
"""

from __future__ import annotations

import logging
import re

from rlvr.rewards.format import strip_thinking
from rlvr.rewards.registry import register_verifier

# math-verify warns once per process that its timeouts are disabled; that is deliberate here.
logging.getLogger("math_verify").setLevel(logging.ERROR)

_FINAL_ANSWER = re.compile(r"final answer is:?\s*(.+)", re.IGNORECASE)  # to the end of the line
_DOLLARS = re.compile(r"(?<!\\)\$([^$]+)(?<!\\)\$")
_UNESCAPED_DOLLAR = re.compile(r"(?<!\\)\$")
_BOXED = "\\boxed"


def last_boxed(text: str) -> str | None:
    """The content of the last `\\boxed{...}` (nested braces kept); None if absent or unclosed."""
    start = text.rfind(_BOXED + "{")
    if start < 0:
        return None
    depth = 0
    open_at = start + len(_BOXED)
    for i in range(open_at, len(text)):
        if text[i] == "{":
            depth += 1
        elif text[i] == "}":
            depth -= 1
            if depth == 0:
                return text[open_at + 1:i]
    return None  # unbalanced: the answer was cut off, there is nothing to grade


def extract_candidate(completion: str) -> str:
    """The part of `completion` that math-verify should parse, in a form it parses well.

    A boxed or `$...$` answer is returned wrapped (as `\\boxed{...}` / `$...$`), since math-verify
    reads the inside of a wrapper as LaTeX; "final answer is" text and the whole-completion
    fallback are returned as plain text, which math-verify searches for its last expression
    (`$plain 42$` would parse as a product of letters, `plain 42` parses as 42).
    """
    committed = strict_candidate(completion)
    if committed is not None:
        return committed
    dollars = _DOLLARS.findall(completion)
    if dollars:
        return f"${dollars[-1]}$"
    return completion


def gold_latex(ground_truth: str) -> str:
    """A ground truth in the form math-verify parses: bare LaTeX is wrapped in `$...$`."""
    if _BOXED in ground_truth or _UNESCAPED_DOLLAR.search(ground_truth):
        return ground_truth  # already delimited
    return f"${ground_truth}$"


def strict_candidate(completion: str) -> str | None:
    """Only an answer the completion commits to: the last `\\boxed{}` or a "final answer is"
    phrase; None otherwise (no fallback to the last `$...$` or the last expression)."""
    boxed = last_boxed(completion)
    if boxed is not None:
        return f"{_BOXED}{{{boxed}}}"
    final = None
    for final in _FINAL_ANSWER.finditer(completion):
        pass
    return None if final is None else final.group(1).strip().rstrip(".")


def _equal_under_math_verify(candidate: str | None, ground_truth: str) -> float:
    from math_verify import parse, verify  # lazy: sympy costs ~1 s, only math workers pay it

    # parse/verify swallow their own errors (returning [] / False) unless asked to raise; an
    # unparseable candidate is a wrong answer, but an unparseable ground truth is a data bug.
    gold = parse(gold_latex(ground_truth), parsing_timeout=None)
    if not gold:
        raise ValueError(f"math-verify cannot parse the ground truth {ground_truth[:80]!r}")
    if candidate is None:
        return 0.0
    answer = parse(candidate, parsing_timeout=None)
    if not answer:
        return 0.0
    return 1.0 if verify(gold, answer, timeout_seconds=None) else 0.0


# LaTeX that changes how an answer looks, not what it is: removed before answers are compared.
_COSMETIC = re.compile(r"\\(?:left|right)(?![a-zA-Z])|\\[!,;: ]|\\displaystyle|\^\{?\\circ\}?|\s+")


def normalize_answer_text(answer: str) -> str:
    """A light, string-only canonical form of an extracted answer for maj@n votes: spacing,
    `\\left`/`\\right`, thin spaces, degree marks, `$`, a trailing period and `\\dfrac` /
    `\\tfrac` (as `\\frac`) go. Not an equivalence test (math-verify's job, too slow and
    unbounded to run in the trainer's process): `0.5` and `\\frac12` still vote apart."""
    text = answer.strip().strip("$").rstrip(".")
    text = text.replace("\\dfrac", "\\frac").replace("\\tfrac", "\\frac")
    return _COSMETIC.sub("", text)


def _answer_key(candidate: str | None) -> str | None:
    if candidate is None:
        return None
    inner = last_boxed(candidate) if candidate.startswith(_BOXED) else candidate
    key = normalize_answer_text(inner if inner is not None else candidate)
    return key or None


def math_answer(completion: str) -> str | None:
    """The answer key maj@n votes with: the boxed, "final answer is" or last `$...$` answer
    (`extract_candidate` without its whole-completion fallback, which is no answer), normalised."""
    text = strip_thinking(completion)
    committed = strict_candidate(text)
    if committed is not None:
        return _answer_key(committed)
    dollars = _DOLLARS.findall(text)
    return _answer_key(dollars[-1]) if dollars else None


def strict_math_answer(completion: str) -> str | None:
    """`math_answer` for `strict_math`: only a boxed or "final answer is" answer."""
    return _answer_key(strict_candidate(strip_thinking(completion)))


@register_verifier("math", answer_extractor=math_answer)
def verify_math(completion: str, ground_truth: str) -> float:
    """1.0 if the extracted answer equals the ground truth under math-verify, else 0.0."""
    return _equal_under_math_verify(extract_candidate(strip_thinking(completion)), ground_truth)


@register_verifier("strict_math", answer_extractor=strict_math_answer)
def verify_strict_math(completion: str, ground_truth: str) -> float:
    """`math`, but only a boxed or "final answer is" answer counts: a model cannot be paid for
    a right number it merely wrote last."""
    return _equal_under_math_verify(strict_candidate(strip_thinking(completion)), ground_truth)
