"""Conformance with Math-Verify's test suite: the `math` verifier.

The cases and their source are in cases/; differences.py names the cases rlvr differs on,
and why."""

import pytest

from tests.rewards.conformance.check import assert_conforms, cases_of


@pytest.mark.parametrize("case", cases_of("math-verify"))
def test_math_case(case):
    assert_conforms(case)
