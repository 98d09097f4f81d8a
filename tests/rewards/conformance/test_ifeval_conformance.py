"""Conformance with Google's IFEval unit tests (instructions_test.py,
instructions_util_test.py): the `ifeval` verifier.

The cases and their source are in cases/; differences.py names the cases rlvr differs on,
and why."""

import pytest

from tests.rewards.conformance.check import assert_conforms, cases_of


@pytest.mark.parametrize("case", cases_of("google-ifeval"))
def test_ifeval_case(case):
    assert_conforms(case)
