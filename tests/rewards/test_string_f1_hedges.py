"""`string_f1` refuses hedges: an answer listing several candidates, or much longer than the
label, earns no more than a single wrong candidate would, and a hedge written with spaces alone
no more than committing earns (rules: `string_match` docstring)."""

import json

import pytest

from rlvr.rewards import get_verifier
from rlvr.rewards.string_match import token_f1


def f1(answer: str, *labels: str) -> float:
    return get_verifier("string_f1")(answer, json.dumps(list(labels)))


@pytest.mark.parametrize("hedge, label, wrong", [
    # plain token F1 paid these 0.33 / 0.5 / 0.5 / 0.4 / 0.57 / 0.36 where "wrong" scores 0
    ("Paris, London, Berlin, Rome, Madrid", "Paris", "London"),
    ("Paris or London", "Paris", "London"),
    ("Paris\nLondon\nBerlin", "Paris", "Berlin"),
    ("London; Berlin; Rome; Paris", "Paris", "Rome"),
    ("Barack Obama and Joe Biden", "Barack Obama", "Joe Biden"),
    ("George Washington, Abraham Lincoln, Thomas Jefferson, John Adams",
     "George Washington Carver", "Abraham Lincoln"),
    ("- Paris\n- London", "Paris", "London"),
    ("Paris/London", "Paris", "London"),
    # issue 48: brackets and question marks paid 0.67 against either side
    ("Paris (London)", "Paris", "London"),
    ("London (Paris)", "Paris", "London"),
    ("Paris? London?", "Paris", "London"),
    ("Paris [London]", "Paris", "London"),
    ("(B) (C) (D) (E)", "C", "B"),  # every option of a multiple choice
])
def test_a_listed_hedge_earns_no_more_than_its_wrong_candidate(hedge, label, wrong):
    assert f1(hedge, label) <= f1(wrong, label) == 0.0


def test_a_hedge_of_near_misses_pays_its_worst_candidate():
    # "city of london" alone scores 2/3 against "city of paris"; the hedge no more than that
    hedge = "city of paris, city of london, city of rome"
    assert f1(hedge, "the city of paris") <= f1("city of london", "the city of paris")


@pytest.mark.parametrize("candidates", [["Paris", "London"], ["Paris", "London", "Berlin"],
                                        ["Barack Obama", "Joe Biden"], ["B", "C", "D", "E"]])
def test_a_hedge_with_spaces_never_beats_committing(candidates):
    """Issue 48: "Paris London" scored 0.67 against Paris and against London, "Paris London
    Berlin" 0.5 against each, so below 0.67 confidence hedging beat committing. Now a k-way
    hedge earns at most 1/k against each, its expected score never above committing's: here
    at even odds, the worst case, where committing earns 1/k too."""
    hedge = " ".join(candidates)
    expected_hedge = sum(f1(hedge, truth) for truth in candidates) / len(candidates)
    expected_commit = max(sum(f1(guess, truth) for truth in candidates) / len(candidates)
                          for guess in candidates)
    assert expected_hedge <= expected_commit + 1e-9
    assert all(f1(hedge, truth) <= 1 / len(candidates) + 1e-9 for truth in candidates)


def test_a_candidate_dump_without_separators_scores_zero():
    assert f1("Paris London Berlin Rome Madrid Oslo", "Paris") == 0.0  # plain F1: 2/7


@pytest.mark.parametrize("answer, labels, expected", [
    ("Paris", ["Paris"], 1.0),
    ("<answer>Barack Obama</answer>", ["Barack Obama"], 1.0),
    ("Washington, D.C.", ["Washington DC"], 1.0),  # equal once normalised: no list
    ("Romeo and Juliet", ["Romeo and Juliet"], 1.0),
    ("Crosby, Stills and Nash", ["Crosby, Stills, Nash & Young"], 3 / 4),  # fewer pieces: plain
    # extra wording costs what a hedge of as many words would: precision (SQuAD's F1: 1/2, 1/3)
    ("The capital is Paris", ["Paris"], 1 / 3),
    ("the city of Paris", ["Paris"], 1 / 3),
    ("The capital of France is Paris", ["Paris"], 1 / 5),
    ("President Barack Obama", ["Barack Obama"], 2 / 3),
    ("Obama", ["Barack Obama"], 2 / 3),  # shorter than the label: F1
    ("hello world", ["hello", "world"], 1 / 2),  # open-instruct: 2/3 (conformance differences)
    ("1,000 people", ["1000"], 1 / 2),  # a thousands comma is no list
    ("Paris, London", ["Paris", "London"], 1 / 2),  # every candidate a label: no list rule
    ("Paris?", ["Paris"], 1.0),
    ("(Paris)", ["Paris"], 1.0),
])
def test_honest_answers_keep_their_capped_f1(answer, labels, expected):
    assert f1(answer, *labels) == pytest.approx(expected)


@pytest.mark.parametrize("answer, labels", [
    ("Paris, City of Paris", ["Paris", "City of Paris"]),  # both candidates right: plain F1
    ("city of paris, city of london", ["the city of paris"]),
    ("Paris or London", ["Paris"]),
])
def test_the_rule_only_lowers_plain_f1(answer, labels):
    plain = max(token_f1(answer, label) for label in labels)
    assert f1(answer, *labels) <= plain


def test_a_label_empty_once_normalised_matches_no_empty_answer():
    # `parse_labels` keeps a list with one usable label; the empty one must not equal "" or "."
    assert f1(".", "the", "Paris") == 0.0
