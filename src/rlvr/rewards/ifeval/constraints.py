"""The constraint registry and IFEval's word-level families: keywords, language, length,
start/end, case and punctuation. Formats and content markers are in `constraints_format`, the
IFBench constraints in `constraints_ifbench`.

A constraint checker is a plain function `(response, **kwargs) -> bool`, registered under its
IFEval id with IFEval's keyword names, so IFEval and IFBench ground truths load unchanged. A
checker sees only the final answer (the `ifeval` verifier strips any <think> part first) and
raises ValueError on kwargs it cannot use (a bad relation, a non-integer count).

Semantics follow IFEval's published constraint list, written afresh (the official checkers need
nltk downloads, see `text`). Where we differ, on purpose: keywords match whole words or phrases
("cat" is not found in "category"); words are counted with `text.split_words` ("don't" is one
word); a capitalised word needs two or more letters ("I" and "A" do not count).
"""

from __future__ import annotations

import inspect
import re
from typing import Any, Callable

from rlvr.registry import add_unique
from rlvr.rewards.ifeval.language import is_language
from rlvr.rewards.ifeval.text import (count_phrase, split_paragraphs, split_sentences,
                                      split_words)

Checker = Callable[..., bool]  # (response: str, **kwargs) -> whether the response satisfies it

CONSTRAINTS: dict[str, Checker] = {}

RELATIONS = ("less than", "at least")  # IFEval's two comparisons


def register_constraint(constraint_id: str) -> Callable[[Checker], Checker]:
    """Decorator: make `fn` the checker for `constraint_id` (e.g. "keywords:existence")."""
    if ":" not in constraint_id:
        raise ValueError(f"constraint id {constraint_id!r} is not 'family:name'")

    def register(fn: Checker) -> Checker:
        add_unique(CONSTRAINTS, "constraint", constraint_id, fn)
        return fn

    return register


def get_checker(constraint_id: str) -> Checker:
    """The checker for `constraint_id`; ValueError (a scorer error, not a 0) if there is none."""
    checker = CONSTRAINTS.get(constraint_id)
    if checker is None:
        raise ValueError(f"unknown instruction constraint '{constraint_id}'")
    return checker


def check_kwargs(constraint_id: str, kwargs: dict[str, Any]) -> None:
    """ValueError unless the checker of `constraint_id` can use `kwargs`: the names it takes, of
    the types its annotations state (a count may be 5.0, as IFBench writes it), with values it
    accepts (a known relation or language), checked by a dry run on a one-word answer."""
    checker = get_checker(constraint_id)
    signature = inspect.signature(checker, eval_str=True)
    try:
        signature.bind("", **kwargs)
    except TypeError as e:
        raise ValueError(f"constraint '{constraint_id}' kwargs {sorted(kwargs)}: {e}") from None
    try:
        for name, value in kwargs.items():
            _check_type(name, value, signature.parameters[name].annotation)
        checker("word", **kwargs)
    except (ValueError, TypeError) as e:
        raise ValueError(f"constraint '{constraint_id}': {e}") from None


def _check_type(name: str, value: Any, annotation: Any) -> None:
    if annotation is int:
        as_count(value, name)
    elif annotation is str and not isinstance(value, str):
        raise ValueError(f"{name}={value!r} is not a string")
    elif annotation == list[str] and (not isinstance(value, list)
                                      or not all(isinstance(v, str) for v in value)):
        raise ValueError(f"{name}={value!r} is not a list of strings")


def as_count(value: Any, name: str) -> int:
    """A whole number from JSON (IFBench stores counts as floats such as 100.0)."""
    if isinstance(value, bool) or not isinstance(value, (int, float, str)):
        raise ValueError(f"{name}={value!r} is not a whole number")
    try:
        number = float(value)
    except ValueError:
        raise ValueError(f"{name}={value!r} is not a whole number") from None
    if not number.is_integer():
        raise ValueError(f"{name}={value!r} is not a whole number")
    return int(number)


def compare(count: int, relation: str, target: Any, name: str = "count") -> bool:
    """IFEval's relation: "less than" is count < target, "at least" is count >= target."""
    target = as_count(target, name)
    if relation == "less than":
        return count < target
    if relation == "at least":
        return count >= target
    raise ValueError(f"relation {relation!r} is not one of {RELATIONS}")


# --- keywords ---------------------------------------------------------------------------------

def _keyword_list(value: Any, name: str) -> list[str]:
    if isinstance(value, str) or not all(isinstance(k, str) for k in value):
        raise ValueError(f"{name} must be a list of strings, got {value!r}")
    return list(value)


@register_constraint("keywords:existence")
def keywords_existence(response: str, *, keywords: list[str]) -> bool:
    """Every keyword appears (whole word or phrase, any case)."""
    return all(count_phrase(response, k) > 0 for k in _keyword_list(keywords, "keywords"))


@register_constraint("keywords:forbidden_words")
def keywords_forbidden_words(response: str, *, forbidden_words: list[str]) -> bool:
    """None of the words appears (whole word, any case)."""
    words = _keyword_list(forbidden_words, "forbidden_words")
    return all(count_phrase(response, w) == 0 for w in words)


@register_constraint("keywords:frequency")
def keywords_frequency(response: str, *, keyword: str, frequency: int, relation: str) -> bool:
    """The keyword occurs `relation` `frequency` times."""
    return compare(count_phrase(response, keyword), relation, frequency, "frequency")


@register_constraint("keywords:letter_frequency")
def keywords_letter_frequency(response: str, *, letter: str, let_frequency: int,
                              let_relation: str) -> bool:
    """The letter (any case) occurs `let_relation` `let_frequency` times."""
    if not isinstance(letter, str) or len(letter) != 1:
        raise ValueError(f"letter={letter!r} is not a single character")
    return compare(response.lower().count(letter.lower()), let_relation, let_frequency,
                   "let_frequency")


# --- language ---------------------------------------------------------------------------------

@register_constraint("language:response_language")
def response_language(response: str, *, language: str) -> bool:
    """The whole response is in `language` (ISO 639-1), by the heuristic of `language`."""
    return is_language(response, language)


# --- length -----------------------------------------------------------------------------------

@register_constraint("length_constraints:number_words")
def number_words(response: str, *, num_words: int, relation: str) -> bool:
    return compare(len(split_words(response)), relation, num_words, "num_words")


@register_constraint("length_constraints:number_sentences")
def number_sentences(response: str, *, num_sentences: int, relation: str) -> bool:
    return compare(len(split_sentences(response)), relation, num_sentences, "num_sentences")


_DIVIDER = re.compile(r"(?<!\*)\*\*\*(?!\*)")  # exactly three: six separate two responses


@register_constraint("length_constraints:number_paragraphs")
def number_paragraphs(response: str, *, num_paragraphs: int) -> bool:
    """Exactly `num_paragraphs` paragraphs separated by the markdown divider `***`."""
    parts = [p.strip() for p in _DIVIDER.split(response)]
    # A divider before the first or after the last paragraph is harmless; an empty paragraph
    # between two dividers is not a paragraph.
    while parts and not parts[0]:
        parts.pop(0)
    while parts and not parts[-1]:
        parts.pop()
    if not all(parts):
        return False
    return len(parts) == as_count(num_paragraphs, "num_paragraphs")


@register_constraint("length_constraints:nth_paragraph_first_word")
def nth_paragraph_first_word(response: str, *, num_paragraphs: int, nth_paragraph: int,
                             first_word: str) -> bool:
    """Exactly `num_paragraphs` blank-line paragraphs, the nth (1-based) starting `first_word`."""
    paragraphs = split_paragraphs(response)
    nth = as_count(nth_paragraph, "nth_paragraph")
    if len(paragraphs) != as_count(num_paragraphs, "num_paragraphs"):
        return False
    if not 1 <= nth <= len(paragraphs):
        return False
    words = split_words(paragraphs[nth - 1])
    return bool(words) and words[0].lower() == first_word.strip().lower()


# --- start and end ----------------------------------------------------------------------------

@register_constraint("startend:end_checker")
def end_checker(response: str, *, end_phrase: str) -> bool:
    """The response ends with `end_phrase` exactly (any case); nothing may follow it."""
    return response.strip().lower().endswith(end_phrase.strip().lower())


_QUOTE_PAIRS = (('"', '"'), ("\u201c", "\u201d"))


@register_constraint("startend:quotation")
def quotation(response: str) -> bool:
    """The whole response is wrapped in double quotation marks."""
    text = response.strip()
    return len(text) > 2 and any(text.startswith(a) and text.endswith(b) for a, b in _QUOTE_PAIRS)


# --- case -------------------------------------------------------------------------------------

@register_constraint("change_case:capital_word_frequency")
def capital_word_frequency(response: str, *, capital_frequency: int,
                           capital_relation: str) -> bool:
    """Words in all capitals (two or more letters) occur `capital_relation` the frequency."""
    count = sum(1 for w in split_words(response)
                if w.isupper() and sum(c.isalpha() for c in w) >= 2)
    return compare(count, capital_relation, capital_frequency, "capital_frequency")


@register_constraint("change_case:english_capital")
def english_capital(response: str) -> bool:
    """English, and no lowercase letter anywhere."""
    return response.isupper() and is_language(response.lower(), "en")


@register_constraint("change_case:english_lowercase")
def english_lowercase(response: str) -> bool:
    """English, and no capital letter anywhere."""
    return response.islower() and is_language(response, "en")


# --- punctuation ------------------------------------------------------------------------------

@register_constraint("punctuation:no_comma")
def no_comma(response: str) -> bool:
    """No comma, ASCII or full-width."""
    return "," not in response and "\uff0c" not in response
