"""pass@k and maj@n against values worked out by hand."""

from math import comb

import pytest

from rlvr.algorithm.pass_at_k import majority_vote, pass_at_k


@pytest.mark.parametrize("n, c, k, expected", [
    (4, 1, 2, 0.5),        # 1 - C(3,2)/C(4,2) = 1 - 3/6
    (5, 2, 2, 0.7),        # 1 - C(3,2)/C(5,2) = 1 - 3/10
    (4, 1, 1, 0.25),       # pass@1 is c/n
    (10, 3, 1, 0.3),
    (6, 2, 3, 0.8),        # 1 - C(4,3)/C(6,3) = 1 - 4/20
    (8, 1, 8, 1.0),        # k = n: any correct sample passes
    (8, 0, 8, 0.0),
    (3, 0, 1, 0.0),        # c = 0
    (3, 3, 1, 1.0),        # c = n
    (5, 3, 3, 1.0),        # n - c < k: every draw holds a correct sample
])
def test_pass_at_k_hand_values(n, c, k, expected):
    assert pass_at_k(n, c, k) == pytest.approx(expected, abs=1e-12)


def test_pass_at_k_matches_the_binomial_form():
    for n in range(1, 13):
        for c in range(n + 1):
            for k in range(1, n + 1):
                exact = 1 - comb(n - c, k) / comb(n, k)
                assert pass_at_k(n, c, k) == pytest.approx(exact, abs=1e-12)


def test_pass_at_k_is_stable_for_large_n():
    # C(2000, 1000) has 600 digits: the product form never builds it.
    value = pass_at_k(2000, 1, 1000)
    assert value == pytest.approx(0.5, abs=1e-12)  # 1 - (1 - 1000/2000)
    assert pass_at_k(10_000, 5000, 100) == pytest.approx(1.0)
    assert 0.0 < pass_at_k(10_000, 1, 1) == pytest.approx(1e-4)


@pytest.mark.parametrize("n, c, k", [(4, 1, 0), (4, 1, 5), (4, 5, 2), (4, -1, 2)])
def test_pass_at_k_rejects_impossible_counts(n, c, k):
    with pytest.raises(ValueError, match="pass@k"):
        pass_at_k(n, c, k)


def test_majority_vote_scores_the_most_common_answer():
    assert majority_vote(["7", "7", "8", None], [True, True, False, False]) == 1.0
    assert majority_vote(["8", "8", "7", "7", "8"], [False, False, True, True, False]) == 0.0


def test_majority_vote_ties_count_equally_and_order_does_not_matter():
    # 7 and 8 have two votes each, 7 is right: a random tie-break is right half the time
    assert majority_vote(["7", "8", "8", "7"], [True, False, False, True]) == 0.5
    assert majority_vote(["8", "7", "7", "8"], [False, True, True, False]) == 0.5


def test_majority_vote_without_answers_is_zero():
    assert majority_vote([None, None], [False, False]) == 0.0
    assert majority_vote([], []) == 0.0
    with pytest.raises(ValueError):
        majority_vote(["1"], [True, False])


def test_majority_vote_ignores_samples_without_an_answer():
    # one right answer, the others said nothing: the one vote decides
    assert majority_vote([None, "3", None], [False, True, False]) == 1.0
