"""`string_f1` refuses hedges: an answer listing several candidates, or much longer than the
label, earns no more than a single wrong candidate would (rules: `string_match` docstring)."""

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
])
def test_a_listed_hedge_earns_no_more_than_its_wrong_candidate(hedge, label, wrong):
    assert f1(hedge, label) <= f1(wrong, label) == 0.0


def test_a_hedge_of_near_misses_pays_its_worst_candidate():
    # "city of london" alone scores 2/3 against "city of paris"; the hedge no more than that
    hedge = "city of paris, city of london, city of rome"
    assert f1(hedge, "the city of paris") <= f1("city of london", "the city of paris")


def test_a_candidate_dump_without_separators_scores_zero():
    assert f1("Paris London Berlin Rome Madrid Oslo", "Paris") == 0.0  # plain F1: 2/7


@pytest.mark.parametrize("answer, labels, expected", [
    ("Paris", ["Paris"], 1.0),
    ("<answer>Barack Obama</answer>", ["Barack Obama"], 1.0),
    ("Washington, D.C.", ["Washington DC"], 1.0),  # equal once normalised: no list
    ("Romeo and Juliet", ["Romeo and Juliet"], 1.0),
    ("Crosby, Stills and Nash", ["Crosby, Stills, Nash & Young"], 3 / 4),  # fewer pieces: plain
    ("The capital is Paris", ["Paris"], 0.5),  # a little extra wording keeps SQuAD's F1
    ("The capital of France is Paris", ["Paris"], 1 / 3),
    ("Obama", ["Barack Obama"], 2 / 3),
    ("hello world", ["hello", "world"], 2 / 3),
    ("1,000 people", ["1000"], 2 / 3),  # a thousands comma is no list
    ("Paris, London", ["Paris", "London"], 2 / 3),  # every candidate a label: plain F1
])
def test_honest_answers_keep_their_plain_f1(answer, labels, expected):
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
