"""Verifiers scored in the scorer's own process, a batch at a time, beside the worker pool.

What it is: the routing between the two kinds of verifier a request may name. Most verifiers
are functions a worker process calls one request at a time (`rlvr.rewards.scorer`). A verifier
whose name is in `BATCHED_VERIFIERS` (the LLM judge, `rlvr.rewards.judge`) needs what a worker
cannot hold, a loaded model or a network client, and is better called once for many requests:
the scorer hands every request naming it to a `BatchVerifier` in its own process, and merges the
scores with those of the request's worker verifiers, in the order the request names them.
What it is not: a place for time limits; a `BatchVerifier` bounds its own time and reports
failures per request (`BatchScore.error`, `timed_out`), and the scorer counts them like any
verifier's.
`checked_score` (what a verifier may return) lives here, not in the scorer, so both kinds of
verifier are held to it: the scorer imports this module, not the other way round.
"""

from __future__ import annotations

import math
import numbers
from dataclasses import dataclass, field, replace
from typing import Mapping, Protocol, Sequence

from rlvr.rewards.registry import BATCHED_VERIFIERS

_ERROR_CHARS = 300
# The largest score magnitude a verifier may return. Rewards become float32 tensors and a group's
# advantage sums and squares them: 1e39 is already inf in float32, and 1e20 overflows once
# squared, either way turning the whole group's advantages into NaN. No reward scale in this
# project comes near 1e6, and 1e6 squared, summed over a group of thousands, stays far below
# float32's largest value (3.4e38).
MAX_ABS_SCORE = 1e6


def checked_score(value: object) -> float:
    """A verifier's return value as a score, or ValueError.

    A score is a real number (`numbers.Real`: int, float, Fraction, NumPy's float and int
    scalars) that is finite and at most MAX_ABS_SCORE in magnitude. A bool is a real number to
    Python and means 1 or 0 unambiguously (`return answer == truth`), so it is accepted; NumPy's
    bool is not a `numbers.Real` and is refused (return `bool(...)`). A str ("1"), None, a
    complex or a tensor is a verifier bug, refused rather than converted: `float("1")` would
    hide it.
    """
    if not isinstance(value, numbers.Real):
        raise ValueError(f"verifier returned {value!r:.40} ({type(value).__name__}), not a "
                         "real number")
    score = float(value)
    if not math.isfinite(score):
        raise ValueError(f"verifier returned {score}")
    if abs(score) > MAX_ABS_SCORE:
        raise ValueError(f"verifier returned {score:g}, beyond the bound of ±{MAX_ABS_SCORE:g}")
    return score


@dataclass(frozen=True)
class BatchScore:
    """One request's result from a batched verifier: a score, or what went wrong."""

    score: float = 0.0
    error: str | None = None
    timed_out: bool = False


class BatchVerifier(Protocol):
    def score_batch(self, requests: Sequence) -> list[BatchScore]:
        """One result per `ScoreRequest`, in order, within the verifier's own time limit; a
        request's failure is its `BatchScore`, not an exception."""
        ...

    def close(self) -> None: ...


@dataclass
class Routing:
    """Which verifiers of a batch of requests run where."""

    worker_requests: list = field(default_factory=list)  # ScoreRequests, worker verifiers only
    worker_index: list[int] = field(default_factory=list)  # the request each one came from
    batched: dict[str, list[int]] = field(default_factory=dict)  # batched name -> requests


def route(requests: Sequence) -> Routing:
    """Split each request's verifiers: batched names to their stage, the rest to the workers
    (a request naming no verifier at all goes to the workers, which report it)."""
    routing = Routing()
    for i, r in enumerate(requests):
        mine = tuple(n for n in r.verifiers if n not in BATCHED_VERIFIERS)
        for name in dict.fromkeys(n for n in r.verifiers if n in BATCHED_VERIFIERS):
            routing.batched.setdefault(name, []).append(i)
        if mine or not r.verifiers:
            routing.worker_requests.append(r if mine == r.verifiers else replace(r, verifiers=mine))
            routing.worker_index.append(i)
    return routing


def run_batched(requests: Sequence, routing: Routing, stages: Mapping[str, BatchVerifier]
                ) -> dict[str, dict[int, BatchScore]]:
    """Each batched name's results, by request index. A stage that is not configured, raises,
    or answers the wrong number of results gives every one of its requests an error."""
    out: dict[str, dict[int, BatchScore]] = {}
    for name, indices in routing.batched.items():
        stage = stages.get(name)
        if stage is None:
            failed = BatchScore(error=f"not configured: '{name}' needs {BATCHED_VERIFIERS[name]}")
            out[name] = {i: failed for i in indices}
            continue
        try:
            results = stage.score_batch([requests[i] for i in indices])
            if len(results) != len(indices):
                raise RuntimeError(f"gave {len(results)} results for {len(indices)} requests")
        except Exception as e:  # noqa: BLE001  a stage's bug is every request's recorded error
            failed = BatchScore(error=f"{type(e).__name__}: {e}"[:_ERROR_CHARS])
            results = [failed] * len(indices)
        out[name] = dict(zip(indices, results))
    return out


def combine(verifiers: tuple[str, ...], worker: tuple[list[float], str | None, bool] | None,
            batched: Mapping[str, BatchScore]) -> tuple[list[float], str | None, bool]:
    """One request's (scores in the order of `verifiers`, error text, timed out) from its worker
    part (the worker verifiers' scores in order, or None if it had none) and its batched
    results. As for a worker timeout alone, a request any part of which timed out has no scores."""
    checked = {name: _refuse_bad_score(b) for name, b in batched.items()}
    worker_scores = iter(worker[0] if worker else [])
    errors = [worker[1]] if worker and worker[1] else []
    errors += [f"{name}: {b.error}" for name, b in checked.items() if b.error]
    timed_out = bool(worker and worker[2]) or any(b.timed_out for b in checked.values())
    if timed_out:
        return [], "; ".join(errors) or None, True
    scores = [checked[n].score if n in checked else next(worker_scores, 0.0) for n in verifiers]
    return scores, "; ".join(errors) or None, False


def _refuse_bad_score(result: BatchScore) -> BatchScore:
    """`result`, or, if its score is no score (`checked_score`), an error scoring 0: the same
    refusal a worker verifier's return value gets."""
    try:
        return replace(result, score=checked_score(result.score))
    except Exception as e:  # noqa: BLE001  a Real whose float() raises is refused all the same
        refused = f"{type(e).__name__}: {e}"
        error = f"{result.error}; {refused}" if result.error else refused
        return replace(result, score=0.0, error=error[:_ERROR_CHARS])
