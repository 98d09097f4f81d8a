"""The assertion every conformance test makes, and the parametrisation it uses."""

from __future__ import annotations

import pytest

from tests.rewards.conformance.differences import DIFFERENCES
from tests.rewards.conformance.runner import SUITES, Case, run_case


def cases_of(suite: str) -> list:
    """`suite`'s runnable cases as pytest params, and its others skipped with their reason."""
    return [pytest.param(case, id=case.name,
                         marks=[pytest.mark.skip(reason=case.not_runnable)]
                         if case.not_runnable else [])
            for case in SUITES[suite]()]


def assert_conforms(case: Case) -> None:
    """rlvr's score equals the reference's, or the case is a named difference, which must hold."""
    result = run_case(case)
    if case.key in DIFFERENCES:
        assert not result.agrees, (f"{case.key} now agrees with the reference: drop it from "
                                   "DIFFERENCES and docs/verifiers.md")
    else:
        assert result.agrees, (f"{case.key}: the reference expects {case.expected!r}, rlvr gives "
                               f"{result.got!r}\ncompletion: {case.completion[:300]!r}\n"
                               f"ground truth: {case.ground_truth[:300]!r}")
