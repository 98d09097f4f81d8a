"""IFBench's proportion and pattern constraints over sentences and words: ratio:stop_words,
ratio:sentence_type/sentence_balance/sentence_words, sentence:alliteration_increment,
words:odd_even_syllables and count:words_japanese.

Written afresh from the prompts' wording (the official checkers need nltk's stop-word list and
punkt model, downloaded at run time). Where the wording leaves room we say how we read it on the
checker. Two are approximations: the stop-word list is our own list of English function words,
and syllables are counted as groups of vowel letters less a silent final "e", which miscounts
words such as "business"; use these scores for training, not beside published IFBench numbers.
"""

from __future__ import annotations

import re

from rlvr.rewards.ifeval.constraints import as_count, register_constraint
from rlvr.rewards.ifeval.text import split_sentences, split_words

STOP_WORDS = frozenset((
    "a about above after again against all am an and any are as at be because been before being "
    "below between both but by can could did do does doing down during each few for from further "
    "had has have having he her here hers herself him himself his how i if in into is it its "
    "itself just me more most my myself no nor not now of off on once only or other our ours "
    "ourselves out over own same she should so some such than that the their theirs them "
    "themselves then there these they this those through to too under until up very was we were "
    "what when where which while who whom why will with would you your yours yourself "
    "yourselves shall may might must let us also").split())


def _lower_words(text: str) -> list[str]:
    return [w.lower() for w in split_words(text)]


@register_constraint("ratio:stop_words")
def stop_words(response: str, *, percentage: int) -> bool:
    """Stop words make up no more than `percentage` percent of the words (and there are words)."""
    words = _lower_words(response)
    if not words:
        return False
    share = 100 * sum(w in STOP_WORDS for w in words) / len(words)
    return share <= as_count(percentage, "percentage")


def _sentence_kinds(response: str) -> list[str]:
    """"?" for a question, "!" for an exclamation, "." for anything else, per sentence. A
    sentence ending "?!" or "!?" asks, so it is a question."""
    kinds = []
    for sentence in split_sentences(response):
        end = sentence.rstrip("\"'\u201d\u2019)] ")[-2:]
        kinds.append("?" if "?" in end else "!" if "!" in end else ".")
    return kinds


@register_constraint("ratio:sentence_type")
def sentence_type(response: str) -> bool:
    """Declarative sentences are exactly twice the questions, with at least one question."""
    kinds = _sentence_kinds(response)
    questions = kinds.count("?")
    return questions >= 1 and kinds.count(".") == 2 * questions


@register_constraint("ratio:sentence_balance")
def sentence_balance(response: str) -> bool:
    """Declarative, interrogative and exclamatory sentences in equal numbers, at least one each.

    "Balanced" read strictly as equal: with three kinds, any other reading needs a tolerance the
    prompt does not give.
    """
    kinds = _sentence_kinds(response)
    counts = {kinds.count(kind) for kind in ".?!"}
    return len(counts) == 1 and counts.pop() >= 1


@register_constraint("ratio:sentence_words")
def sentence_words(response: str) -> bool:
    """Exactly three sentences of equal length in characters, no word used twice (any case)."""
    sentences = split_sentences(response)
    words = _lower_words(response)
    return (len(sentences) == 3 and len({len(s) for s in sentences}) == 1
            and len(words) == len(set(words)))


def _longest_alliteration(words: list[str]) -> int:
    longest = run = 0
    previous = ""
    for word in words:
        run = run + 1 if word[0] == previous else 1
        previous = word[0]
        longest = max(longest, run)
    return longest


@register_constraint("sentence:alliteration_increment")
def alliteration_increment(response: str) -> bool:
    """Two or more sentences, each with a longer run of consecutive words sharing a first letter
    than the sentence before."""
    runs = [_longest_alliteration(_lower_words(s)) for s in split_sentences(response)]
    return len(runs) >= 2 and all(b > a for a, b in zip(runs, runs[1:]))


_VOWEL_GROUP = re.compile(r"[aeiouy]+")


def count_syllables(word: str) -> int:
    """Vowel-letter groups, less a silent final "e" ("make" 1, "table" 2); at least 1."""
    word = word.lower()
    groups = len(_VOWEL_GROUP.findall(word))
    if word.endswith("e") and not word.endswith(("le", "ee")) and groups > 1:
        groups -= 1
    return max(groups, 1)


@register_constraint("words:odd_even_syllables")
def odd_even_syllables(response: str) -> bool:
    """Neighbouring words alternate between odd and even syllable counts (at least two words)."""
    parities = [count_syllables(w) % 2 for w in split_words(response) if w[0].isalpha()]
    return len(parities) >= 2 and all(a != b for a, b in zip(parities, parities[1:]))


_JAPANESE = re.compile(r"[\u3040-\u30ff\u3400-\u4dbf\u4e00-\u9fff\uff66-\uff9f]")


@register_constraint("count:words_japanese")
def words_japanese(response: str, *, N: int) -> bool:  # noqa: N803  (IFBench's name)
    """Every N-th whitespace-separated word holds Japanese script, and there is at least one.

    Words are split on whitespace, not by `split_words`: a Japanese word has no spaces inside,
    and kana next to Latin letters would otherwise be cut apart.
    """
    step = as_count(N, "N")
    if step < 1:
        raise ValueError(f"N={N!r} must be at least 1")
    every_nth = response.split()[step - 1::step]
    return bool(every_nth) and all(_JAPANESE.search(w) for w in every_nth)
