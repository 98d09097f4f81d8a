"""`gsm8k` / `last_number`: the last number in the completion equals the ground truth.

Lenient on purpose: small models rarely follow answer-format instructions, so the last number
written is the answer (NOTES: SmolLM2 almost never uses tags or a bare final line).
"""

from __future__ import annotations

import re

from rlvr.rewards.registry import register_verifier

# A sign, digits with optional thousands commas, an optional decimal part.
_NUMBER = re.compile(r"-?\d+(?:,\d{3})*(?:\.\d+)?|-?\.\d+")


def last_number(text: str) -> float | None:
    matches = _NUMBER.findall(text)
    if not matches:
        return None
    return float(matches[-1].replace(",", ""))


def gold_number(ground_truth: str) -> float:
    """GSM8K's solutions end in `#### 72`; plain ground truths are just the number."""
    text = ground_truth.split("####")[-1]
    value = last_number(text)
    if value is None:
        raise ValueError(f"ground truth {ground_truth[:80]!r} holds no number")
    return value


@register_verifier("gsm8k")
@register_verifier("last_number")
def verify_last_number(completion: str, ground_truth: str) -> float:
    answer = last_number(completion)
    if answer is None:
        return 0.0
    gold = gold_number(ground_truth)
    return 1.0 if abs(answer - gold) <= 1e-6 * max(1.0, abs(gold)) else 0.0
