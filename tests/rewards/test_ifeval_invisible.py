"""Invisible characters neither split nor glue what the `ifeval` checks count: every check reads
the answer as a reader sees it (`text.visible_text`). Each attack below scored 1.0 before."""

import json

import pytest

from rlvr.rewards import get_verifier

ZWSP, FILLER = "\u200b", "\u3164"  # a zero-width space (Cf); a Hangul filler, shown as a blank


def row(constraint_id: str, **kwargs) -> str:
    return json.dumps([{"id": constraint_id, "kwargs": kwargs}])


ATTACKS = {
    # one word on screen, ten `\w+` runs
    "words at least, split": (ZWSP.join("sunshining"), row(
        "length_constraints:number_words", num_words=10, relation="at least")),
    "word range, split": (ZWSP.join("sunshiningx"), row(
        "count:word_count_range", min_words=10, max_words=20)),
    # six words on screen, one `\w+` run
    "words less than, glued": (FILLER.join("The cat sat on the mat".split()), row(
        "length_constraints:number_words", num_words=3, relation="less than")),
    "forbidden word, zero-width space": ("That is b" + ZWSP + "ad news.", row(
        "keywords:forbidden_words", forbidden_words=["bad"])),
    "forbidden word, word joiner": ("That is b\u2060ad news.", row(
        "keywords:forbidden_words", forbidden_words=["bad"])),
    "keyword less than": ("cat c" + ZWSP + "at c\ufeffat", row(
        "keywords:frequency", keyword="cat", frequency=2, relation="less than")),
    "sentences less than, Cf": ("One." + ZWSP + " Two." + ZWSP + " Three.", row(
        "length_constraints:number_sentences", num_sentences=2, relation="less than")),
    "sentences less than, filler": ("One." + FILLER + "Two." + FILLER + "Three.", row(
        "length_constraints:number_sentences", num_sentences=2, relation="less than")),
    "capital words at least": ("I like N" + ZWSP + "A" + ZWSP + "S" + ZWSP + "A", row(
        "change_case:capital_word_frequency", capital_frequency=5, capital_relation="at least")),
    "unique words": ("the the" + ZWSP + " the\u200c the\u200d the\u2060", row(
        "count:unique_word_count", N=5)),
    "repeats": ("the cat and the" + ZWSP + " dog", row("words:repeats", small_n=1)),
    "no consecutive": ("cat " + ZWSP + "cow dog", row("words:no_consecutive")),
    "no whitespace": ("hello" + FILLER + "world", row("format:no_whitespace")),
}


@pytest.mark.parametrize("answer, truth", ATTACKS.values(), ids=ATTACKS.keys())
def test_invisible_characters_do_not_change_what_is_counted(answer, truth):
    assert get_verifier("ifeval")(answer, truth) == 0.0


@pytest.mark.parametrize("answer, truth", [
    ("sunshine", row("length_constraints:number_words", num_words=2, relation="less than")),
    ("That is good news.", row("keywords:forbidden_words", forbidden_words=["bad"])),
    ("One. Two. Three.", row("length_constraints:number_sentences", num_sentences=3,
                             relation="at least")),
    # Unicode spaces were already spaces to every counter, and stay so
    ("The\u00a0cat\u2009sat\u3000down", row("length_constraints:number_words", num_words=4,
                                            relation="at least")),
    ("une r\u00e9ponse\u00a0: oui", row("length_constraints:number_words", num_words=3,
                                        relation="at least")),
    ("family \U0001F468\u200d\U0001F469\u200d\U0001F467 time",
     row("length_constraints:number_words", num_words=2, relation="at least")),
])
def test_visible_answers_score_as_before(answer, truth):
    assert get_verifier("ifeval")(answer, truth) == 1.0


def test_visible_text_removes_format_characters_and_spaces_fillers():
    from rlvr.rewards.ifeval.text import visible_text  # here, so the attacks above run on old code

    assert visible_text("w\u200bo\u200cr\u200dd\u2060s\ufeff\u00ad!") == "words!"
    assert visible_text("a\u3164b\u2800c") == "a b c"
    assert visible_text("caf\u00e9 \u00a0") == "caf\u00e9 \u00a0"  # letters and spaces kept
    assert visible_text("tag\U000E0041\U000E0042") == "tag"  # "ASCII smuggling" tag characters


@pytest.mark.parametrize("comma", ["\u201a", "\uff0c", "\u060c", "\u3001", "\ufe50", "\U0001f102"])
def test_a_comma_on_screen_is_a_comma(comma):
    """IFEval looks for the ASCII comma only: "One\u201a two" kept a comma on screen (U+201A is
    drawn as one) and met "no commas"."""
    verify = get_verifier("ifeval")
    assert verify(f"One{comma} two and three.", row("punctuation:no_comma")) == 0.0
    assert verify("One two and three.", row("punctuation:no_comma")) == 1.0


def test_every_comma_of_this_pythons_unicode_counts():
    import sys
    import unicodedata

    from rlvr.rewards.ifeval.constraints import COMMAS

    named = {chr(c) for c in range(sys.maxunicode + 1)
             if unicodedata.category(chr(c)) == "Po" and "COMMA" in unicodedata.name(chr(c), "")}
    assert named <= COMMAS, sorted(named - COMMAS)
