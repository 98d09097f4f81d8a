"""IFBench's word-pattern constraints: words:* and sentence:keyword/increment.

Most IFBench word checks split the answer on whitespace after removing ASCII punctuation
("don't" becomes "dont", "well-known" becomes "wellknown", an em dash stays a word); each checker
here says which split its reference uses, and uses the same. Sentences come from `text`'s
splitter and nltk-like tokens from `text.word_tokens`, offline stand-ins for nltk. See
`constraints_ifbench` for how these scores relate to official ones.
"""

from __future__ import annotations

import string
from collections import Counter

from rlvr.rewards.ifeval.constraints import (MIN_WORDS_FOR_A_RELATION, as_count,
                                             register_constraint)
from rlvr.rewards.ifeval.text import (EDGE_PUNCTUATION, drop_punctuation, split_sentences,
                                      whole_word_pattern, word_tokens)

_CONSONANTS = frozenset("bcdfghjklmnpqrstvwxyz")
_PRIMES = frozenset({2, 3, 5, 7, 11, 13, 17, 19, 23, 29, 31, 37, 41, 43, 47, 53, 59, 61, 67, 71,
                     73, 79, 83, 89, 97})


def _bare_words(text: str) -> list[str]:
    """Lowercased whitespace tokens once ASCII punctuation is removed: IFBench's usual split."""
    return drop_punctuation(text.lower()).split()


@register_constraint("words:palindrome")
def palindrome(response: str) -> bool:
    """At least 10 different palindromic words of 5 or more characters."""
    found = {w for w in _bare_words(response) if len(w) >= 5 and w == w[::-1]}
    return len(found) >= 10


@register_constraint("words:prime_lengths")
def prime_lengths(response: str) -> bool:
    """Every word has a prime number of characters, ASCII punctuation not counted ("don't" has
    4); an em dash standing alone is a word of one character."""
    words = drop_punctuation(response).split()
    return bool(words) and all(len(w) in _PRIMES for w in words)


@register_constraint("words:repeats")
def repeats(response: str, *, small_n: int) -> bool:
    """No word (any case) occurs more than `small_n` times."""
    counts = Counter(_bare_words(response))
    return max(counts.values(), default=0) <= as_count(small_n, "small_n")


@register_constraint("words:no_consecutive")
def no_consecutive(response: str) -> bool:
    """No two neighbouring words start with the same character; two words at least."""
    words = _bare_words(response)
    return len(words) >= MIN_WORDS_FOR_A_RELATION and all(a[0] != b[0]
                                                          for a, b in zip(words, words[1:]))


@register_constraint("words:alphabet")
def alphabet(response: str) -> bool:
    """Each word starts with the letter after the previous word's first letter, z wrapping to a;
    the first must be a letter a-z (any case), and a word starting otherwise breaks the chain;
    two words at least."""
    words = drop_punctuation(response).strip(EDGE_PUNCTUATION).lower().split()
    if len(words) < MIN_WORDS_FOR_A_RELATION or not "a" <= words[0][0] <= "z":
        return False
    return all(ord(b[0]) - ord("a") == (ord(a[0]) - ord("a") + 1) % 26
               for a, b in zip(words, words[1:]))


@register_constraint("words:consonants")
def consonants(response: str) -> bool:
    """Every whitespace token holds two consonant letters in a row; punctuation is not removed
    first, so a dash standing alone fails."""
    words = response.lower().split()
    return bool(words) and all(any(a in _CONSONANTS and b in _CONSONANTS
                                   for a, b in zip(w, w[1:])) for w in words)


@register_constraint("words:vowel")
def vowel(response: str) -> bool:
    """One paragraph (no line break) whose words use at most three of the vowels a e i o u."""
    text = response.strip().lower()
    return bool(text) and "\n" not in text and len(set(text) & set("aeiou")) <= 3


@register_constraint("words:last_first")
def last_first(response: str) -> bool:
    """Two or more sentences, each starting with the word the previous one ended with (any case;
    whitespace tokens with punctuation stripped from the sentence's outer ends only)."""
    sentences = split_sentences(response)
    if len(sentences) < 2:
        return False
    for before, after in zip(sentences, sentences[1:]):
        last = before.rstrip(EDGE_PUNCTUATION).split()
        first = after.lstrip(EDGE_PUNCTUATION).split()
        if not last or not first or last[-1].lower() != first[0].lower():
            return False
    return True


@register_constraint("words:paragraph_last_first")
def paragraph_last_first(response: str) -> bool:
    """Every line (paragraph) ends with the word it starts with: its whitespace tokens, any case,
    with punctuation stripped from the line's ends only ("Hello, world hello" fails: "hello,").
    Lines without words are skipped; the answer needs two words at least."""
    total = 0
    for line in response.split("\n"):
        words = line.strip().lower().strip(EDGE_PUNCTUATION).split()
        total += len(words)
        if words and words[0] != words[-1]:
            return False
    return total >= MIN_WORDS_FOR_A_RELATION


@register_constraint("words:words_position")
def words_position(response: str, *, keyword: str) -> bool:
    """The second token and the second-to-last word are both `keyword` (any case). Tokens as
    nltk makes them, punctuation included: a comma after the first word is the second token; a
    final punctuation mark is passed over."""
    tokens = word_tokens(response)
    key = keyword.strip().lower()
    last = -3 if tokens and tokens[-1] in string.punctuation else -2
    return len(tokens) >= -last and tokens[1].lower() == key and tokens[last].lower() == key


@register_constraint("words:keywords_specific_position")
def keywords_specific_position(response: str, *, keyword: str, n: int, m: int) -> bool:
    """`keyword` is the m-th word of the n-th sentence (both 1-based, any case); words are the
    nltk-like tokens holding a letter or digit, so "don't" is two."""
    n, m = as_count(n, "n"), as_count(m, "m")
    sentences = split_sentences(response)
    if not 1 <= n <= len(sentences):
        return False
    words = [t for t in word_tokens(sentences[n - 1]) if any(ch.isalnum() for ch in t)]
    return 1 <= m <= len(words) and words[m - 1].lower() == keyword.strip().lower()


@register_constraint("sentence:keyword")
def sentence_keyword(response: str, *, word: str, N: int) -> bool:  # noqa: N803
    """The N-th sentence (1-based) contains `word` between word boundaries, any case."""
    position = as_count(N, "N")
    sentences = split_sentences(response)
    return 1 <= position <= len(sentences) and bool(
        whole_word_pattern(word).search(sentences[position - 1]))


@register_constraint("sentence:increment")
def sentence_increment(response: str, *, small_n: int) -> bool:
    """Two or more sentences, each with exactly `small_n` more words than the one before (words:
    whitespace tokens once ASCII punctuation is removed)."""
    step = as_count(small_n, "small_n")
    counts = [len(drop_punctuation(s).split()) for s in split_sentences(response)]
    return len(counts) >= 2 and all(b - a == step for a, b in zip(counts, counts[1:]))
