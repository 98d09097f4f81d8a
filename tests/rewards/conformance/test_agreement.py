"""The agreement target: at least 98.5% of the references' runnable cases agree with rlvr.

The per-case tests (test_*_conformance.py) make sure the cases that disagree are exactly those
named in differences.py; so agreement is counted here from that list, without running the cases
twice. `benchmarks/verifiers.py` measures it by running them."""

from tests.rewards.conformance.differences import DIFFERENCES
from tests.rewards.conformance.runner import SUITES, TARGET, all_cases, not_runnable_elsewhere


def test_every_named_difference_is_a_runnable_case_with_a_reason():
    runnable = {case.key for case in all_cases() if not case.not_runnable}
    assert set(DIFFERENCES) <= runnable
    assert all(len(reason) > 40 for reason in DIFFERENCES.values())


def test_every_reference_suite_has_cases_and_every_skip_a_reason():
    cases = all_cases()
    assert {case.suite for case in cases} == set(SUITES)
    assert len({case.key for case in cases}) == len(cases), "case names must be unique"
    assert all(reason for reason in not_runnable_elsewhere().values())


def test_agreement_meets_the_target():
    runnable = [case for case in all_cases() if not case.not_runnable]
    agreement = 1 - len(DIFFERENCES) / len(runnable)
    assert agreement >= TARGET, f"{agreement:.1%} of {len(runnable)} runnable cases agree"
