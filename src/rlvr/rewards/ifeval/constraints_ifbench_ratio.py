"""IFBench's proportion and pattern constraints over sentences and words: ratio:stop_words,
ratio:sentence_type/sentence_balance/sentence_words, sentence:alliteration_increment,
words:odd_even_syllables and count:words_japanese.

Each follows the rules of IFBench's checker, written afresh (the official ones need nltk's
stop-word list and punkt model, downloaded at run time, and `syllapy`). Stop words are nltk's
English list, written out here; sentences come from `text`'s splitter, not punkt; syllables are
counted as groups of vowel letters less a silent final "e", which miscounts words such as
"business". Use these scores for training, not beside published IFBench numbers.
"""

from __future__ import annotations

import re

from rlvr.rewards.ifeval.constraints import as_count, register_constraint
from rlvr.rewards.ifeval.text import (EDGE_PUNCTUATION, count_word_runs, drop_punctuation,
                                      split_sentences, split_words)

# nltk's English stop words that hold no apostrophe: IFBench matches them against `\w+` runs,
# so "don't" is "don" and "t", both in the list, and "you're" can never match as one word.
STOP_WORDS = frozenset((
    "i me my myself we our ours ourselves you your yours yourself yourselves he him his himself "
    "she her hers herself it its itself they them their theirs themselves what which who whom "
    "this that these those am is are was were be been being have has had having do does did "
    "doing a an the and but if or because as until while of at by for with about against between "
    "into through during before after above below to from up down in out on off over under "
    "again further then once here there when where why how all any both each few more most "
    "other some such no nor not only own same so than too very s t can will just don should now "
    "d ll m o re ve y ain aren couldn didn doesn hadn hasn haven isn ma mightn mustn needn shan "
    "shouldn wasn weren won wouldn").split())
_WORD_RUN = re.compile(r"\w+")


@register_constraint("ratio:stop_words")
def stop_words(response: str, *, percentage: int) -> bool:
    """Stop words make up no more than `percentage` percent of the words (`\\w+` runs, any
    case), and there are words."""
    words = count_word_runs(response)
    if not words:
        return False
    stops = sum(1 for run in _WORD_RUN.finditer(response) if run.group().lower() in STOP_WORDS)
    return 100 * stops / words <= as_count(percentage, "percentage")


def _count_endings(response: str) -> dict[str, int]:
    """How many sentences end with ".", "?" and "!", read off each sentence's last character as
    IFBench does: one ending '."' or "?!" is of none or the last kind."""
    ends = [sentence[-1] for sentence in split_sentences(response)]
    return {mark: ends.count(mark) for mark in ".?!"}


@register_constraint("ratio:sentence_type")
def sentence_type(response: str) -> bool:
    """Sentences ending "." are exactly twice those ending "?", with at least one question."""
    ends = _count_endings(response)
    return ends["?"] >= 1 and ends["."] == 2 * ends["?"]


@register_constraint("ratio:sentence_balance")
def sentence_balance(response: str) -> bool:
    """As many sentences end "." as "?" as "!", at least one each. ("Balanced" read strictly as
    equal, as IFBench does.)"""
    ends = _count_endings(response)
    return ends["."] == ends["?"] == ends["!"] >= 1


@register_constraint("ratio:sentence_words")
def sentence_words(response: str) -> bool:
    """Exactly three sentences of equal length in characters, no word used twice (any case).
    IFBench checks the first two only; the prompt asks for all different words too."""
    sentences = split_sentences(response)
    words = [w.lower() for w in split_words(response)]
    return (len(sentences) == 3 and len({len(s) for s in sentences}) == 1
            and len(words) == len(set(words)))


def alliterative_words(sentence: str) -> int:
    """How many words of `sentence` stand in a run of two or more neighbours sharing a first
    character, summed over its runs (IFBench's measure: "big bad dog dug" is 4). Words are
    lowercased whitespace tokens with leading punctuation stripped."""
    firsts = [w[0] for w in (t.lstrip(EDGE_PUNCTUATION) for t in sentence.lower().split()) if w]
    total = 0
    for i in range(1, len(firsts)):
        if firsts[i] == firsts[i - 1]:
            total += 2 if i < 2 or firsts[i - 1] != firsts[i - 2] else 1  # a run opens with 2
    return total


@register_constraint("sentence:alliteration_increment")
def alliteration_increment(response: str) -> bool:
    """Two or more sentences, each with more alliterative words (see `alliterative_words`)
    than the sentence before."""
    counts = [alliterative_words(s) for s in split_sentences(response)]
    return len(counts) >= 2 and all(b > a for a, b in zip(counts, counts[1:]))


_VOWEL_GROUP = re.compile(r"[aeiouy]+")


def count_syllables(word: str) -> int:
    """Vowel-letter groups, less a silent final "e" ("make" 1, "table" 2); at least 1, but 0 for
    a word holding a digit, as `syllapy` (IFBench's counter) says of "42" and "3rd"."""
    word = word.lower()
    if any(ch.isdigit() for ch in word):
        return 0
    groups = len(_VOWEL_GROUP.findall(word))
    if word.endswith("e") and not word.endswith(("le", "ee")) and groups > 1:
        groups -= 1
    return max(groups, 1)


@register_constraint("words:odd_even_syllables")
def odd_even_syllables(response: str) -> bool:
    """Neighbouring words alternate between odd and even syllable counts (at least two words;
    words: lowercased whitespace tokens once ASCII punctuation is removed)."""
    parities = [count_syllables(w) % 2 for w in drop_punctuation(response.lower()).split()]
    return len(parities) >= 2 and all(a != b for a, b in zip(parities, parities[1:]))


_JAPANESE = re.compile(r"[\u3040-\u30ff\u4e00-\u9fff]")  # IFBench's: kana and common kanji


@register_constraint("count:words_japanese")
def words_japanese(response: str, *, N: int) -> bool:  # noqa: N803  (IFBench's name)
    """Every N-th whitespace-separated word holds kana or kanji, and there is at least one such
    word. As in IFBench, an N-th word of digits or ASCII punctuation alone is passed over."""
    step = as_count(N, "N")
    if step < 1:
        raise ValueError(f"N={N!r} must be at least 1")
    every_nth = [w.strip(EDGE_PUNCTUATION) for w in response.split()[step - 1::step]]
    every_nth = [w for w in every_nth if w and not w.isdigit()]
    return bool(every_nth) and all(_JAPANESE.search(w) for w in every_nth)
