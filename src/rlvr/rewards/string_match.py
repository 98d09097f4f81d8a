"""Verifiers for short free-text answers and for length targets.

`string_matcher`: the normalised answer equals the normalised ground truth (1 or 0).
`string_f1`: the best token F1 of the answer against any label (a JSON list, or one string).
`max_length` / `up_to_max_length`: the answer's length in words against a target.

Normalisation (SQuAD style): lowercase, punctuation and the articles a/an/the removed,
whitespace collapsed. The answer is the inside of `<answer>` tags when present, and never the
`<think>` part (see `format.strip_thinking`).

Lengths are words, not tokens: a verifier sees text only, and words keep the target
independent of the tokenizer. A word is a whitespace-separated run holding a letter or digit
(`format.has_letter_or_digit`), so "." or a zero-width space is no word, and an answer with no
word (empty, blank, a `<think>` never closed) scores 0 under both length verifiers: "at most
50 words" must not pay for saying nothing. A target of 0 words is rejected at data load.
"""

from __future__ import annotations

import json
import re
import string
from collections import Counter

from rlvr.rewards.format import has_letter_or_digit, strip_thinking
from rlvr.rewards.registry import register_verifier

_ARTICLES = re.compile(r"\b(a|an|the)\b")
_PUNCTUATION = str.maketrans("", "", string.punctuation)


def normalize_answer(text: str) -> str:
    text = text.lower().translate(_PUNCTUATION)
    return " ".join(_ARTICLES.sub(" ", text).split())


def _check_label(ground_truth: str) -> str:
    label = normalize_answer(ground_truth)
    if not label:
        raise ValueError(f"ground truth {ground_truth[:80]!r} is empty once normalised")
    return label


def normalized_answer(completion: str) -> str | None:
    """The answer key maj@n votes with: the normalised answer, as the verifiers compare it."""
    return normalize_answer(strip_thinking(completion)) or None


@register_verifier("string_matcher", ground_truth_check=_check_label,
                   answer_extractor=normalized_answer)
def verify_string_match(completion: str, ground_truth: str) -> float:
    label = _check_label(ground_truth)
    return 1.0 if normalize_answer(strip_thinking(completion)) == label else 0.0


def parse_labels(ground_truth: str) -> list[str]:
    """A JSON list of strings, or a plain string taken as the one label."""
    try:
        labels = json.loads(ground_truth)
    except json.JSONDecodeError:
        labels = [ground_truth]
    if isinstance(labels, str):
        labels = [labels]
    if not (isinstance(labels, list) and labels and all(isinstance(x, str) for x in labels)):
        raise ValueError(f"ground truth {ground_truth[:80]!r} is not a string or a non-empty "
                         "JSON list of strings")
    if not any(normalize_answer(x) for x in labels):
        raise ValueError(f"ground truth {ground_truth[:80]!r} has no label left once normalised")
    return labels


def token_f1(prediction: str, label: str) -> float:
    pred, gold = normalize_answer(prediction).split(), normalize_answer(label).split()
    common = sum((Counter(pred) & Counter(gold)).values())
    if common == 0:
        return 0.0
    precision, recall = common / len(pred), common / len(gold)
    return 2 * precision * recall / (precision + recall)


@register_verifier("string_f1", ground_truth_check=parse_labels, answer_extractor=normalized_answer)
def verify_string_f1(completion: str, ground_truth: str) -> float:
    labels = parse_labels(ground_truth)
    answer = strip_thinking(completion)
    return max(token_f1(answer, label) for label in labels)


def parse_target_words(ground_truth: str) -> int:
    try:
        target = int(str(ground_truth).strip())
    except ValueError:
        raise ValueError(f"ground truth {ground_truth[:80]!r} is not a whole number of words") \
            from None
    if target <= 0:
        raise ValueError(f"length target {target} must be a positive number of words")
    return target


def _num_words(completion: str) -> int:
    """The words of the completion's answer: its whitespace-separated runs that hold a letter or
    digit (a lone "-" or "\\u200b" between words is no word)."""
    return sum(1 for run in strip_thinking(completion).split() if has_letter_or_digit(run))


@register_verifier("max_length", ground_truth_check=parse_target_words)
def verify_max_length(completion: str, ground_truth: str) -> float:
    """1 at exactly the target, falling linearly to 0 at twice (or zero times) the target."""
    target, words = parse_target_words(ground_truth), _num_words(completion)
    if words == 0:  # the line below gives 0 too; said outright, as up_to_max_length must
        return 0.0
    return max(0.0, 1.0 - abs(words - target) / target)


@register_verifier("up_to_max_length", ground_truth_check=parse_target_words)
def verify_up_to_max_length(completion: str, ground_truth: str) -> float:
    """1 from one word up to the target, then falling linearly to 0 at twice the target; 0 for
    an answer with no word, which is under any limit without answering anything."""
    target, words = parse_target_words(ground_truth), _num_words(completion)
    if words == 0:
        return 0.0
    return max(0.0, 1.0 - max(0, words - target) / target)
