"""Offline text splitting for the instruction checks: words, tokens, sentences, paragraphs, and
keyword matching.

Why our own: the official IFEval and IFBench checkers split sentences with nltk's punkt model and
tokenize with nltk's `word_tokenize` (which needs punkt too); both download models on first use
and fail on an offline machine (see NOTES). A page of regular expressions serves the checks here,
and being ours it behaves the same in every worker process, with nothing to fetch. Where the
references need no model (IFEval counts words as `\\w+` runs, matches keywords with `re`), the
functions here follow them exactly; `split_sentences` and `word_tokens` are approximations.

How `split_sentences` approximates punkt (Kiss & Strunk's unsupervised splitter, as trained for
English in nltk): punkt breaks after "!" and "?" always, and after a full stop unless the word
before it is a known abbreviation, an initial or a number, in which case its "orthographic
heuristic" breaks only before a word that usually starts sentences. rlvr keeps the first part as
punkt has it (a full stop after an ordinary word ends a sentence whatever follows: "this is one.
this is two." is two sentences) and replaces the learned parts by fixed rules: titles ("Dr.",
"Mr.") never end a sentence; other abbreviations ("e.g.", "etc.", "U.S.", "Ph.D."), numbers and
an ellipsis end one only before a capital letter; a capital initial before a capital ("J. R.
Smith") does not. Like punkt, a line break or a blank line is no sentence end, so a salutation
("Dear John,") or a placeholder line ("[Name]") is part of the sentence after it. One rule is
rlvr's own: a line that opens a list item ("- ", "* ", "1. ") starts a new sentence, and its
number marker is no sentence (punkt would count "1." as a sentence of its own).

What it is not: a linguistic tokenizer. It handles what model answers commonly contain: common
abbreviations, initials, decimals ("3.14"), numbered list markers, closing quotes after the full
stop, list items. It does not segment scripts written without spaces (Chinese, Japanese, Thai):
such text counts as few long words.
"""

from __future__ import annotations

import re
import string
import unicodedata
from functools import lru_cache


class _VisibleTable(dict):
    """A `str.translate` table, filled on first sight of each code point: format characters
    (category Cf) deleted, blank-rendering fillers made a space, everything else kept. Filled
    lazily because building it for all 1.1M code points would cost a worker's import 0.2 s
    (163 of them are Cf); it holds at most the distinct characters the answers have used."""

    # Letters (Lo) and a symbol (So) that render as blank space: the Hangul fillers and the
    # Braille blank. As letters they would glue "the\u3164cat\u3164sat" into one word.
    BLANK_FILLERS = frozenset("\u115f\u1160\u3164\uffa0\u2800")

    def __missing__(self, code: int) -> int | str | None:
        char = chr(code)
        if char in self.BLANK_FILLERS:
            value = " "
        elif unicodedata.category(char) == "Cf":
            value = None
        else:
            value = code
        self[code] = value
        return value


_VISIBLE = _VisibleTable()


def visible_text(text: str) -> str:
    r"""`text` as a reader sees it: invisible format characters (Unicode category Cf: U+200B
    zero-width space, U+200C/U+200D joiners, U+2060 word joiner, U+FEFF, U+00AD soft hyphen,
    the U+E0000 tag characters, ...) removed, and blank-rendering fillers turned into spaces.

    Why: the checks count words, sentences and keywords in the text they are given, and an
    invisible character changes that count without changing what a reader sees:
    "w\u200bo\u200br\u200bd" is one word on screen but four `\w+` runs ("at least N words"),
    "b\u200bad" hides a forbidden "bad", and "One.\u200b Two." is two sentences on screen but
    one to a splitter that wants a space after the full stop. Removing them, rather than
    reading them as spaces, keeps the count what is seen: "hello\u200bworld" shows as one run
    of letters. Unicode spaces (NBSP, thin, ideographic) need nothing here: `str.split`, `\s`
    and `\w+` already treat them as spaces.
    The price: a Persian or Indic word written with a zero-width (non-)joiner counts as one
    word, where IFEval's `\w+` counts two.
    """
    if text.isascii():  # no ASCII character is Cf or a filler
        return text
    return text.translate(_VISIBLE)


# Python's `\w` leaves out combining marks, which would cut Hindi or Tamil words at every vowel
# sign: add the mark ranges (Indic blocks less the danda, Arabic and Hebrew points, accents).
_MARKS = ("\u0300-\u036f\u0483-\u0489\u0591-\u05c7\u0610-\u061a\u064b-\u065f\u0670"
          "\u06d6-\u06ed\u0900-\u0963\u0966-\u0dff\u0e31-\u0e3a\u0e47-\u0e4e\u3099\u309a")
# A word: letters/digits, optionally joined by an apostrophe, hyphen or inner dot, so "don't",
# "well-known", "e.g" and "3.14" are one word each (IFEval's `\w+` would count two).
_WORD = re.compile(rf"[\w{_MARKS}]+(?:['\u2019.\-][\w{_MARKS}]+)*")

# Blank lines end a paragraph; a line that opens a list item starts a new sentence (a blank line
# alone does not: punkt does not split there).
_PARAGRAPH_BREAK = re.compile(r"\n[ \t]*\n")
_SENTENCE_BLOCK_BREAK = re.compile(r"\n(?=[ \t]*(?:[*\u2022\-]|\d+[.)])[ \t])")

# A run of terminators, then any closing quotes or brackets, then whitespace or the end: the
# decimal point of "3.14" is followed by a digit, so it never matches. Tried only where a run
# begins, and each part taken whole (`++`, `*+`; giving some back could never end at a space):
# else every position of "!?" * 50000 + "x" would rescan the rest of the run, quadratically.
_SENTENCE_END = re.compile(
    r"(?<![.!?\u2026\u203d\u0964])[.!?\u2026\u203d\u0964]++[\"'\u201d\u2019)\]]*+(?=\s|$)")
_TOKEN_BEFORE = re.compile(r"(\w+(?:\.\w+)*)$")
_HAS_WORD = re.compile(r"\w")
_NON_SPACE = re.compile(r"\S")

# A full stop after a title never ends a sentence: a name follows.
_TITLES = frozenset({
    "mr", "mrs", "ms", "dr", "prof", "st", "sr", "jr", "rev", "gen", "capt", "lt", "col", "sgt",
    "gov", "sen", "rep", "mt", "ft",
})
# After these (and any word with an inner dot: "U.S.", "Ph.D.", "a.m.") a full stop ends a
# sentence only before a capital: "etc. and so on" goes on, "etc. The next" does not.
_ABBREVIATIONS = frozenset({
    "e.g", "i.e", "vs", "cf", "approx", "fig", "vol", "pp", "al", "ca", "viz", "etc", "inc",
    "ltd", "co", "corp", "dept", "est", "no", "nos", "jan", "feb", "mar", "apr", "jun", "jul",
    "aug", "sep", "sept", "oct", "nov", "dec",
})


# The verifier runs a dozen checkers on one answer and many split it the same way: remembering
# the splits of the last few answers makes that one pass each. Results are tuples, so no
# checker can change what the next one reads.
_RECENT = 16


@lru_cache(maxsize=_RECENT)
def split_words(text: str) -> tuple[str, ...]:
    """The words of `text` in order (see `_WORD`), punctuation dropped."""
    return tuple(_WORD.findall(text))


def split_paragraphs(text: str) -> list[str]:
    """Paragraphs separated by blank lines, stripped; empty ones dropped."""
    return [p.strip() for p in _PARAGRAPH_BREAK.split(text) if p.strip()]


@lru_cache(maxsize=_RECENT)
def split_sentences(text: str) -> tuple[str, ...]:
    """Sentences of `text`, stripped, each holding at least one word character."""
    sentences = []
    for block in _SENTENCE_BLOCK_BREAK.split(text):
        start = 0
        content = _first_non_space(block, 0)
        for end in _SENTENCE_END.finditer(block):
            if _ends_sentence(block, start, content, end):
                sentences.append(block[start:end.end()])
                start = end.end()
                content = _first_non_space(block, start)
        sentences.append(block[start:])
    return tuple(s.strip() for s in sentences if _HAS_WORD.search(s))


def _first_non_space(block: str, pos: int) -> int:
    found = _NON_SPACE.search(block, pos)
    return found.start() if found else len(block)


def _ends_sentence(block: str, start: int, content: int, end: re.Match) -> bool:
    """Whether the terminator `end` closes the sentence that began at `start` and whose first
    non-space character is at `content` (the rules: module docstring)."""
    # Every look here is bounded (a 40-character window, the next non-space): slicing from
    # `start` or to the block's end would make "Dr. Dr. Dr. ..." quadratic.
    terminators = end.group()
    if any(c in terminators for c in "!?\u203d\u0964"):
        return True
    next_match = _NON_SPACE.search(block, end.end())
    before_capital = bool(next_match) and next_match.group().isupper()
    if "\u2026" in terminators or terminators.count(".") > 1:  # an ellipsis
        return before_capital or not next_match
    window_start = max(start, end.start() - 40)
    token_match = _TOKEN_BEFORE.search(block, window_start, end.start())
    token = token_match.group(1) if token_match else ""
    if token.lower() in _TITLES:
        return False
    if token.isdigit() and token_match.start(1) == content:
        return False  # "1." opening a numbered item
    if token.lower() in _ABBREVIATIONS or "." in token or token.isdigit():
        return before_capital or not next_match
    if len(token) == 1 and token.isupper() and before_capital:
        return False  # an initial: "J. R. Smith"
    return True


_WORD_RUN = re.compile(r"\w+")


def count_word_runs(text: str) -> int:
    """Words as IFEval and IFBench count them (nltk's `RegexpTokenizer(r"\\w+")`): runs of word
    characters, so "don't" is two words and "3.14" two numbers."""
    return sum(1 for _ in _WORD_RUN.finditer(text))


# nltk's Treebank tokenizer splits these off a word: "don't" -> "do" "n't", "it's" -> "it" "'s".
_CONTRACTION = re.compile(r"(?:n['\u2019]t|['\u2019](?:s|re|ve|ll|d|m))$", re.IGNORECASE)
_TOKEN = re.compile(rf"{_WORD.pattern}|\.\.\.|[^\w\s]")


@lru_cache(maxsize=_RECENT)
def word_tokens(text: str) -> tuple[str, ...]:
    """An offline stand-in for nltk's `word_tokenize`: words (see `_WORD`) with contractions split
    off, and each punctuation mark (or "...") as a token of its own. It differs from nltk at the
    margins: a word's final dot is always split off ("Dr." gives "Dr" "."), and straight double
    quotes stay `"` (nltk rewrites them as `` and '')."""
    tokens = []
    for token in _TOKEN.findall(text):
        contraction = _CONTRACTION.search(token)
        if contraction and contraction.start() > 0:
            tokens += (token[:contraction.start()], contraction.group())
        else:
            tokens.append(token)
    return tuple(tokens)


_ASCII_PUNCTUATION = str.maketrans("", "", string.punctuation)
EDGE_PUNCTUATION = string.punctuation + " "  # what IFBench strips off a whitespace token's ends


def drop_punctuation(text: str) -> str:
    """`text` without ASCII punctuation, as IFBench cleans an answer before splitting it on
    whitespace ("don't" becomes "dont", "3.14" becomes "314"; curly quotes and dashes stay)."""
    return text.translate(_ASCII_PUNCTUATION)


def keyword_pattern(keyword: str) -> re.Pattern:
    """`keyword` as IFEval searches for it: the literal text, any case, anywhere (so "cat" is
    found in "category")."""
    if not keyword.strip():
        raise ValueError("an empty keyword cannot be matched")
    return re.compile(re.escape(keyword), re.IGNORECASE)


def whole_word_pattern(word: str) -> re.Pattern:
    """`word` between word boundaries, any case: IFEval's forbidden words and IFBench's
    sentence keyword (`\\b` + word + `\\b`). The edges are written as lookarounds, which
    is what `\\b` means next to a letter or digit; next to punctuation ("C++") `\\b` would
    demand a letter beside it and never find the word alone."""
    if not word.strip():
        raise ValueError("an empty keyword cannot be matched")
    return re.compile(rf"(?<!\w){re.escape(word)}(?!\w)", re.IGNORECASE)
