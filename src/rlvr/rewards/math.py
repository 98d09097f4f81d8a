"""`math`: symbolic equivalence of the final answer with math-verify.

The candidate is the last `\\boxed{}` (balanced braces), else the text after "final answer is",
else the last `$...$`, else the whole completion. math-verify's own timeouts use signal.alarm,
which fails off the main thread, so they are disabled: the scorer bounds time by killing its
worker process instead.
"""

from __future__ import annotations

import logging
import re

from rlvr.rewards.registry import register_verifier

# math-verify warns on every call that its timeouts are disabled; we bound time ourselves.
logging.getLogger("math_verify").setLevel(logging.ERROR)

_FINAL_ANSWER = re.compile(r"final answer is[:\s]*(.+)", re.IGNORECASE | re.DOTALL)
_DOLLARS = re.compile(r"\$([^$]+)\$")


def last_boxed(text: str) -> str | None:
    start = text.rfind("\\boxed{")
    if start < 0:
        return None
    depth, i = 0, start + len("\\boxed")
    for j in range(i, len(text)):
        if text[j] == "{":
            depth += 1
        elif text[j] == "}":
            depth -= 1
            if depth == 0:
                return text[i + 1:j]
    return None  # unbalanced: no answer


def extract_candidate(completion: str) -> str:
    boxed = last_boxed(completion)
    if boxed is not None:
        return boxed
    final = _FINAL_ANSWER.search(completion)
    if final:
        return final.group(1).strip().split("\n")[0].rstrip(".")
    dollars = _DOLLARS.findall(completion)
    if dollars:
        return dollars[-1]
    return completion


@register_verifier("math")
def verify_math(completion: str, ground_truth: str) -> float:
    from math_verify import parse, verify

    gold = parse(f"${ground_truth}$", parsing_timeout=None)
    answer = parse(f"${extract_candidate(completion)}$", parsing_timeout=None)
    if not gold or not answer:
        return 0.0
    return 1.0 if verify(gold, answer, timeout_seconds=None) else 0.0
