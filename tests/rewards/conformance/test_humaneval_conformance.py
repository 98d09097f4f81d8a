"""Conformance with human-eval's example problem and samples: the `code` verifier.

The cases and their source are in cases/; differences.py names the cases rlvr differs on,
and why."""

import pytest

from tests.rewards.conformance.check import assert_conforms, cases_of


@pytest.mark.parametrize("case", cases_of("human-eval"))
def test_humaneval_case(case):
    assert_conforms(case)
