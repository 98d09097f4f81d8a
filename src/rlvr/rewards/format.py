"""Where a completion's answer is, and whether it has R1's `<think>...</think><answer>...</answer>`
shape. Pure string functions, linear in the completion's length (no backtracking regexes: a
completion of 10,000 `<think>` tags must cost no more than reading it).

Verifiers that judge the answer (ifeval, string_match, code) call `strip_thinking` first, so a
constraint met only while thinking earns nothing. `format_reward_scores` is the format reward
itself, applied by the episode stage after verification. `has_letter_or_digit` is what
"empty" means for an answer, for every verifier that must not pay one (ifeval, the length
verifiers, the format reward).
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from contextvars import ContextVar

THINK_OPEN, THINK_CLOSE = "<think>", "</think>"
ANSWER_OPEN, ANSWER_CLOSE = "<answer>", "</answer>"
_TAGS = (THINK_OPEN, THINK_CLOSE, ANSWER_OPEN, ANSWER_CLOSE)

# Whether the completions being graded mark their thinking and answer with tags. Where nothing
# asked the model for tags (its chat template, its prompt, the format reward), a `</think>` or
# an `<answer>` in its text is text, and taking it as a mark would let the policy choose which
# piece is graded: rule-breaking text, then "</think>ok". The scorer sets it per request
# (`answer_tags`); a call outside it takes tags as marks, as before.
_TAGS_MARK_ANSWERS: ContextVar[bool] = ContextVar("rlvr_tags_mark_answers", default=True)


@contextmanager
def answer_tags(mark_answers: bool) -> Iterator[None]:
    """Within it, `strip_thinking` takes tags as marks (True) or grades the whole text
    (False)."""
    token = _TAGS_MARK_ANSWERS.set(mark_answers)
    try:
        yield
    finally:
        _TAGS_MARK_ANSWERS.reset(token)


def mentions_answer_tags(text: str) -> bool:
    """Whether `text` (a chat template, a prompt) names the think or answer tags."""
    return any(tag in text for tag in _TAGS)

# The Hangul fillers render as nothing, yet are letters to Unicode (category Lo, so
# str.isalnum() is True): without this list "\u3164" alone would be a non-empty answer.
# They are the only letters or digits among Unicode's default-ignorable code points.
_INVISIBLE_LETTERS = frozenset("\u115f\u1160\u3164\uffa0")


def strip_thinking(text: str) -> str:
    """The answer part of a completion.

    The text after the last `</think>` (a `<think>` never closed means the model never got to
    answer: ""), then, if that holds an `<answer>...</answer>`, the inside of the last one.
    A completion with no tags at all is all answer, as is every completion where tags mark
    nothing (`answer_tags(False)`).
    """
    if not _TAGS_MARK_ANSWERS.get():
        return text.strip()
    close = text.rfind(THINK_CLOSE)
    if close >= 0:
        text = text[close + len(THINK_CLOSE):]
    elif THINK_OPEN in text:
        return ""
    tagged = answer_in_tags(text)
    return text.strip() if tagged is None else tagged


def has_letter_or_digit(text: str) -> bool:
    """Whether `text` holds a letter or a digit of any script (str.isalnum), the invisible
    Hangul fillers aside: the test an answer must pass to be more than empty.

    `text.strip()` is not enough: zero-width characters (U+200B, U+2060, U+FEFF) are not
    whitespace, and a lone "." is not empty either, yet none of them answers anything. The price
    of the rule: an answer made only of symbols ("∞", "→") counts as empty.
    """
    return any(c.isalnum() and c not in _INVISIBLE_LETTERS for c in text)


def answer_in_tags(text: str) -> str | None:
    """The inside of the last `<answer>...</answer>`, stripped; None if there is none."""
    close = text.rfind(ANSWER_CLOSE)
    if close < 0:
        return None
    open_ = text.rfind(ANSWER_OPEN, 0, close)
    if open_ < 0:
        return None
    return text[open_ + len(ANSWER_OPEN):close].strip()


def has_r1_format(text: str) -> bool:
    """`<think>reasoning</think>` then `<answer>answer</answer>` and nothing else but whitespace;
    each tag exactly once, and each part holds a letter or digit (`has_letter_or_digit`: a
    part of zero-width characters or a lone "." is as empty as no part at all)."""
    s = text.strip()
    if not (s.startswith(THINK_OPEN) and s.endswith(ANSWER_CLOSE)):
        return False
    if any(s.count(tag) != 1 for tag in (THINK_OPEN, THINK_CLOSE, ANSWER_OPEN, ANSWER_CLOSE)):
        return False
    think, _, rest = s[len(THINK_OPEN):].partition(THINK_CLOSE)
    rest = rest.strip()
    if not rest.startswith(ANSWER_OPEN):
        return False
    answer = rest[len(ANSWER_OPEN):-len(ANSWER_CLOSE)]
    return has_letter_or_digit(think) and has_letter_or_digit(answer)


def format_reward_scores(scores: list[float], texts: list[str], value: float,
                         additive: bool) -> list[float]:
    """Apply the R1 format reward to verifier scores.

    additive: `score + value` when the format holds. Otherwise the format gates the score: a
    completion without it scores 0 whatever its answer. Gating is the default because an
    additive bonus is paid to long wrong answers too, and is known to push up their length.
    """
    if len(scores) != len(texts):
        raise ValueError(f"{len(scores)} scores but {len(texts)} completions")
    ok = [has_r1_format(t) for t in texts]
    if additive:
        return [s + (value if good else 0.0) for s, good in zip(scores, ok)]
    return [s if good else 0.0 for s, good in zip(scores, ok)]
