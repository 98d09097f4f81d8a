"""Verifiers for short free-text answers and for length targets.

`string_matcher`: the normalised answer equals the normalised ground truth (1 or 0).
`string_f1`: the best token F1 (capped by precision) of the answer against any label (a JSON list,
or one string),
refusing hedges (below).
`max_length` / `up_to_max_length`: the answer's length in words against a target.

Normalisation (SQuAD style): lowercase, punctuation and the articles a/an/the removed,
whitespace collapsed. The answer is the inside of `<answer>` tags when present, and never the
`<think>` part (see `format.strip_thinking`).

Lengths are words, not tokens: a verifier sees text only, and words keep the target
independent of the tokenizer. A word is a whitespace-separated run holding a letter or digit
(`format.has_letter_or_digit`), so "." or a zero-width space is no word, and an answer with no
word (empty, blank, a `<think>` never closed) scores 0 under both length verifiers: "at most
50 words" must not pay for saying nothing. A target of 0 words is rejected at data load.

Hedges under `string_f1`. Plain token F1 (SQuAD's, and open-instruct's `F1Verifier`, which
add no defence: SQuAD's answers are extracted spans, short by construction) pays both sides of a
hedge: "Paris London", "Paris (London)" and "Paris? London?" score 0.67 against "Paris" and
against "London", so below about 0.67 confidence listing two guesses beats committing to one.
The rule: no hedge earns more than committing. In full:
- an answer equal to a label once normalised scores 1 (so "Washington, D.C." is no list);
- precision caps the score: an answer earns at most the share of its words that are the
  label's, `min(F1, precision)`. A hedge of k candidates that share no word then earns at
  most the word-weighted mean of what each earns alone, so never more, in expectation, than
  committing to the likeliest: "Paris London" earns 1/2 against either, "Paris London Berlin"
  1/3, each exactly what committing earns at even odds. An answer shorter than the label keeps
  its F1 ("Obama" against "Barack Obama": 2/3); extra wording costs what a hedge would ("the
  city of Paris": 1/3, where SQuAD's F1 gives 1/2);
- an answer that lists more distinct candidates than a label has pieces (split at commas and
  "/" not between digits, semicolons, line breaks, "|", "&", "?", brackets, and the words "or"
  and "and") is a visible hedge: it scores its worst candidate's score alone, capped as above,
  so never more than the wrong candidate it contains would score by itself ("Paris (London)",
  "Paris? London?", "Paris or London": 0 against either);
- an answer of more than `2 * label_words + 3` words once normalised (the longest label's
  words) scores 0: a dump of candidates without separators.
What no rule here can do: tell "Paris London" (a hedge) from "Paris France" (a clarification)
by their words, so a hedge written with spaces alone is held to the expected bound above, not
to its worst candidate's 0. The price of the separators: "Paris, France", "Paris (France)" or
"It is Paris, the capital of France." scores 0 against "Paris" (plain F1: 0.67, 0.67, 0.29).
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


def _precision_recall(prediction: str, label: str) -> tuple[float, float]:
    pred, gold = normalize_answer(prediction).split(), normalize_answer(label).split()
    common = sum((Counter(pred) & Counter(gold)).values())
    return (common / len(pred), common / len(gold)) if common else (0.0, 0.0)


def token_f1(prediction: str, label: str) -> float:
    """SQuAD's token F1, with no hedge rule (`hedge_guarded_f1` adds it)."""
    precision, recall = _precision_recall(prediction, label)
    if precision == 0.0:
        return 0.0
    return 2 * precision * recall / (precision + recall)


def capped_f1(prediction: str, label: str) -> float:
    """Token F1 capped by precision, `min(F1, precision)`: an answer earns at most the share of
    its words that are the label's, so k guesses side by side earn at most 1/k (module
    docstring). Equal to F1 wherever precision >= recall (an answer no longer than it needs)."""
    return min(token_f1(prediction, label), _precision_recall(prediction, label)[0])


# Where a list of candidates divides: commas and "/" not between digits ("1,000" and "3/4" are
# numbers), semicolons, line breaks, "|", "&", question marks and brackets ("Paris? London?",
# "Paris (London)"), and the words "or" and "and" ("and/or" too); with their full-width forms.
_CANDIDATE_SEPARATOR = re.compile(
    r"(?<!\d)[,/](?!\d)|[;\n|&?()\[\]{}\uff0c\u3001\uff1f\uff08\uff09]|\b(?:or|and)\b",
    re.IGNORECASE)
# "Much longer than the label": a candidate dump without separators ("paris london berlin rome
# madrid") scores 0 past this; "capital of france is paris" (5 words for 1) still pays its F1.
_EXTRA_WORDS, _LENGTH_FACTOR = 3, 2


def candidates(text: str) -> list[str]:
    """The distinct normalised pieces of `text` between list separators, in order."""
    pieces = (normalize_answer(p) for p in _CANDIDATE_SEPARATOR.split(text))
    return list(dict.fromkeys(p for p in pieces if p))


def hedge_guarded_f1(answer: str, labels: list[str]) -> float:
    """The best token F1 of `answer` over `labels`, a hedge paying no more than its worst
    candidate would alone (rules: module docstring)."""
    labels = [label for label in labels if normalize_answer(label)]  # "the" matches nothing
    normal = normalize_answer(answer)
    golds = [normalize_answer(label) for label in labels]
    if normal in golds:
        return 1.0
    longest = max(len(gold.split()) for gold in golds)
    if len(normal.split()) > _LENGTH_FACTOR * longest + _EXTRA_WORDS:
        return 0.0
    plain = max(capped_f1(answer, label) for label in labels)
    pieces = candidates(answer)
    if len(pieces) <= max(len(candidates(label)) for label in labels):
        return plain
    worst = min(max(capped_f1(piece, label) for label in labels) for piece in pieces)
    return min(plain, worst)


@register_verifier("string_f1", ground_truth_check=parse_labels, answer_extractor=normalized_answer)
def verify_string_f1(completion: str, ground_truth: str) -> float:
    return hedge_guarded_f1(strip_thinking(completion), parse_labels(ground_truth))


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
