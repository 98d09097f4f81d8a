"""Conformance with open-instruct's verifier tests: `string_matcher`, `string_f1`, `gsm8k`,
`ifeval`, and `math` on its normalisation pairs.

The cases and their source are in cases/; differences.py names the cases rlvr differs on,
and why."""

import pytest

from tests.rewards.conformance.check import assert_conforms, cases_of


@pytest.mark.parametrize("case", cases_of("open-instruct"))
def test_open_instruct_case(case):
    assert_conforms(case)
