"""Conformance with IFBench's instructions_test.py: the `ifeval` verifier on IFBench's
constraints.

The cases and their source are in cases/; differences.py names the cases rlvr differs on,
and why."""

import pytest

from tests.rewards.conformance.check import assert_conforms, cases_of


@pytest.mark.parametrize("case", cases_of("ifbench"))
def test_ifbench_case(case):
    assert_conforms(case)
