"""The constraint registry and IFEval's word-level families: keywords, language, length,
start/end, case and punctuation. Formats and content markers are in `constraints_format`, the
IFBench constraints in `constraints_ifbench`.

A constraint checker is a plain function `(response, **kwargs) -> bool`, registered under its
IFEval id with IFEval's keyword names, so IFEval and IFBench ground truths load unchanged. A
checker sees only the final answer (the `ifeval` verifier strips any <think> part first) and
raises ValueError on kwargs it cannot use (a bad relation, a non-integer count).

Each checker applies the matching rules of IFEval's own checker (Google's, as kept in
open-instruct's IFEvalG and IFBench's `classic_instructions`), written afresh: keywords are
found as case-insensitive substrings, forbidden words between word boundaries, words are `\\w+`
runs. Where the reference needs nltk or langdetect (sentences, tokens, language) the check is an
offline approximation, and a few checks are stricter on purpose; each difference is listed in
docs/verifiers.md ("Where rlvr's IFEval/IFBench checks differ from the references").
"""

from __future__ import annotations

import inspect
import re
from typing import Any, Callable

from rlvr.registry import Registry
from rlvr.rewards.ifeval.language import is_language
from rlvr.rewards.ifeval.text import (count_word_runs, keyword_pattern, split_sentences,
                                      whole_word_pattern, word_tokens)

Checker = Callable[..., bool]  # (response: str, **kwargs) -> whether the response satisfies it

CONSTRAINTS: Registry[Checker] = Registry("constraint")

RELATIONS = ("less than", "at least")  # IFEval's two comparisons

# A rule about how words follow one another ("no two consecutive words share a first letter",
# "each word starts with the next letter", "each word on its own line", "a paragraph ends with
# its first word") says nothing about a one-word answer, which IFBench passes: "a" met them all.
# rlvr needs two words for such a rule to be met (docs/verifiers.md, "No vacuous passes").
MIN_WORDS_FOR_A_RELATION = 2


def register_constraint(constraint_id: str) -> Callable[[Checker], Checker]:
    """Decorator: make `fn` the checker for `constraint_id` (e.g. "keywords:existence")."""
    if ":" not in constraint_id:
        raise ValueError(f"constraint id {constraint_id!r} is not 'family:name'")
    return CONSTRAINTS.register(constraint_id)


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
    """A whole number from JSON (IFBench stores counts as floats such as 100.0), not negative
    (IFEval refuses `let_frequency=-1`: no count is below zero)."""
    if isinstance(value, bool) or not isinstance(value, (int, float, str)):
        raise ValueError(f"{name}={value!r} is not a whole number")
    try:
        number = float(value)
    except ValueError:
        raise ValueError(f"{name}={value!r} is not a whole number") from None
    if not number.is_integer():
        raise ValueError(f"{name}={value!r} is not a whole number")
    if number < 0:
        raise ValueError(f"{name}={value!r} is negative")
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
    """Every keyword appears, any case, even inside a longer word ("cat" in "category")."""
    return all(keyword_pattern(k).search(response) for k in _keyword_list(keywords, "keywords"))


@register_constraint("keywords:forbidden_words")
def keywords_forbidden_words(response: str, *, forbidden_words: list[str]) -> bool:
    """None of the words appears as a whole word, any case ("bad" is not in "badger")."""
    words = _keyword_list(forbidden_words, "forbidden_words")
    return not any(whole_word_pattern(w).search(response) for w in words)


@register_constraint("keywords:frequency")
def keywords_frequency(response: str, *, keyword: str, frequency: int, relation: str) -> bool:
    """The keyword occurs `relation` `frequency` times, counted as for `keywords:existence`
    (non-overlapping occurrences, inside words too)."""
    count = len(keyword_pattern(keyword.strip()).findall(response))
    return compare(count, relation, frequency, "frequency")


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
    """Words counted as `\\w+` runs, as IFEval counts them ("don't" is two)."""
    return compare(count_word_runs(response), relation, num_words, "num_words")


@register_constraint("length_constraints:number_sentences")
def number_sentences(response: str, *, num_sentences: int, relation: str) -> bool:
    return compare(len(split_sentences(response)), relation, num_sentences, "num_sentences")


# IFEval splits at every `***`, taking one space or newline either side with it: so "****" or a
# "***bold italic***" divides too, and "******" leaves an empty paragraph between its halves.
_DIVIDER = re.compile(r"\s?\*\*\*\s?")


def split_between(parts: list[str]) -> list[str] | None:
    """The non-empty `parts` of a split, or None if an empty one lies between two others: a
    separator before the first part or after the last is harmless, two in a row are not."""
    kept = [p for p in parts if p.strip()]
    inner = parts[1:-1]
    return None if any(not p.strip() for p in inner) else kept


@register_constraint("length_constraints:number_paragraphs")
def number_paragraphs(response: str, *, num_paragraphs: int) -> bool:
    """Exactly `num_paragraphs` paragraphs separated by the markdown divider `***`."""
    paragraphs = split_between(_DIVIDER.split(response))
    return paragraphs is not None and len(paragraphs) == as_count(num_paragraphs,
                                                                    "num_paragraphs")


_FIRST_WORD_END = re.compile(r"[.,?!'\"]")


@register_constraint("length_constraints:nth_paragraph_first_word")
def nth_paragraph_first_word(response: str, *, num_paragraphs: int, nth_paragraph: int,
                             first_word: str) -> bool:
    """Exactly `num_paragraphs` paragraphs separated by "\\n\\n", the nth (1-based) starting
    `first_word`.

    IFEval's rules: paragraphs are the pieces between "\\n\\n" that hold more than
    whitespace, but the nth is picked among all pieces, so an extra blank line before it shifts
    it; its first word is its first whitespace token, less leading quotes, up to the first . , ?
    ! or quote ("Then," is "then", "**Then**" is "**then**").
    """
    pieces = response.split("\n\n")
    count = sum(1 for p in pieces if p.strip())
    nth = as_count(nth_paragraph, "nth_paragraph")
    if count != as_count(num_paragraphs, "num_paragraphs") or not 1 <= nth <= count:
        return False
    words = pieces[nth - 1].split()
    if not words:
        return False
    word = words[0].lstrip("'").lstrip('"')
    return _FIRST_WORD_END.split(word, maxsplit=1)[0].lower() == first_word.strip().lower()


# --- start and end ----------------------------------------------------------------------------

@register_constraint("startend:end_checker")
def end_checker(response: str, *, end_phrase: str) -> bool:
    """The response ends with `end_phrase` (any case); only outer whitespace and straight double
    quotes may follow it, so a response also wrapped in quotation marks passes."""
    return response.strip().strip('"').lower().endswith(end_phrase.strip().lower())


@register_constraint("startend:quotation")
def quotation(response: str) -> bool:
    """The whole response is wrapped in straight double quotation marks around something (curly
    ones do not count, as in IFEval; `""` alone does not either)."""
    text = response.strip()
    return len(text) > 2 and text[0] == '"' and text[-1] == '"'


# --- case -------------------------------------------------------------------------------------

@register_constraint("change_case:capital_word_frequency")
def capital_word_frequency(response: str, *, capital_frequency: int,
                           capital_relation: str) -> bool:
    """Tokens in all capitals occur `capital_relation` the frequency. As in IFEval, any token
    whose letters are all capitals counts: "I", "A" and "3D" too, "DON'T" as two."""
    count = sum(1 for token in word_tokens(response) if token.isupper())
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

# A comma in any script: every punctuation mark (Unicode category Po) named COMMA, as of
# Unicode 14 (`tests/rewards/test_ifeval_invisible.py` checks the running Python's list is
# here), and what renders as one: U+201A (the low single quotation mark, drawn as a comma) and
# the digit-comma signs U+1F101-U+1F10A ("0," as one character). IFEval looks for the ASCII one
# only, so "One\u201a two" kept its comma on screen and met "no commas".
COMMAS = frozenset(
    "\u002c\u055d\u060c\u07f8\u1363\u1802\u1808\u2e32\u2e34\u2e41\u2e49\u2e4c\u3001\ua4fe"
    "\ua60d\ua6f5\ufe10\ufe11\ufe50\ufe51\uff0c\uff64\U0001144d\U0001145a\U00016e97\U0001da87"
    "\u201a" + "".join(chr(c) for c in range(0x1F101, 0x1F10B)))


@register_constraint("punctuation:no_comma")
def no_comma(response: str) -> bool:
    """No comma in any script, nor a character drawn as one (`COMMAS`)."""
    return COMMAS.isdisjoint(response)
