"""Score completions with their verifiers in worker processes, each request under a time limit.

Why processes: a verifier can hang (a pathological LaTeX expression, a huge exponent) or crash,
and a thread cannot be stopped. Each worker serves one request at a time; one that overruns the
limit is killed and replaced, and its request scores 0 with `timed_out` set. A verifier that
raises scores 0 with the error recorded. Either way the run goes on, and the counts come out as
metrics. Workers start from a forkserver that preloads only the verifiers (not torch), so
replacing one is cheap.
"""

from __future__ import annotations

import logging
import multiprocessing as mp
import time
from collections import deque
from dataclasses import dataclass
from multiprocessing.connection import Connection, wait

from rlvr.types import RewardOutcome

log = logging.getLogger(__name__)
WORKER_MEMORY_BYTES = 4 * 2**30  # a runaway expression fails with MemoryError, not OOM-kills us


@dataclass(frozen=True)
class ScoreRequest:
    sample_id: str
    completion: str
    ground_truth: str
    verifiers: tuple[str, ...]


def run_verifiers(completion: str, ground_truth: str,
                  verifiers: tuple[str, ...]) -> tuple[dict[str, float], str | None]:
    """Every named verifier's score; the first error's text (its verifier scores 0)."""
    from rlvr.rewards.registry import get_verifier

    scores: dict[str, float] = {}
    error = None
    for name in verifiers:
        try:
            scores[name] = float(get_verifier(name)(completion, ground_truth))
        except Exception as e:  # noqa: BLE001  (any verifier failure is recorded, not raised)
            scores[name] = 0.0
            error = error or f"{name}: {type(e).__name__}: {str(e)[:200]}"
    return scores, error


def _worker_main(conn: Connection) -> None:
    import resource

    import rlvr.rewards  # noqa: F401  (registers the built-in verifiers)

    try:
        resource.setrlimit(resource.RLIMIT_AS, (WORKER_MEMORY_BYTES, WORKER_MEMORY_BYTES))
    except (ValueError, OSError):
        pass
    conn.send("ready")  # the time limit starts counting only after start-up
    while True:
        try:
            message = conn.recv()
        except EOFError:
            return
        if message is None:
            return
        conn.send(run_verifiers(*message))


class _Worker:
    def __init__(self, ctx) -> None:
        self.conn, child = ctx.Pipe()
        self.process = ctx.Process(target=_worker_main, args=(child,), daemon=True)
        self.process.start()
        child.close()
        self.task: int | None = None
        self.started = 0.0

    def wait_ready(self, timeout_s: float = 120.0) -> None:
        if not self.conn.poll(timeout_s) or self.conn.recv() != "ready":
            raise RuntimeError("a verifier worker process did not start")

    def kill(self) -> None:
        self.process.kill()
        self.process.join(timeout=5)
        self.conn.close()


class RewardScorer:
    def __init__(self, num_workers: int = 2, timeout_s: float = 5.0, aggregator: str = "last"):
        if aggregator not in ("last", "sum"):
            raise ValueError(f"reward aggregator '{aggregator}' is not 'last' or 'sum'")
        self.timeout_s = timeout_s
        self.aggregator = aggregator
        self.num_errors = self.num_timeouts = 0
        self._reported = (0, 0)
        self._ctx = mp.get_context("forkserver")
        # Workers fork from a server that has already imported the verifiers and math-verify.
        self._ctx.set_forkserver_preload(["rlvr.rewards", "math_verify", "sympy"])
        self._in_process = num_workers == 0
        self._workers = [_Worker(self._ctx) for _ in range(num_workers)]
        for w in self._workers:
            w.wait_ready()

    def _combine(self, scores: dict[str, float]) -> float:
        if not scores:
            return 0.0
        return sum(scores.values()) if self.aggregator == "sum" else list(scores.values())[-1]

    def _outcome(self, req: ScoreRequest, scores: dict[str, float], error: str | None,
                 timed_out: bool = False) -> RewardOutcome:
        if timed_out:
            self.num_timeouts += 1
            log.warning("verifier timed out after %.1f s on sample %s", self.timeout_s,
                        req.sample_id)
        elif error:
            self.num_errors += 1
            log.warning("verifier error on sample %s: %s", req.sample_id, error)
        return RewardOutcome(score=self._combine(scores), error=error, timed_out=timed_out,
                             per_verifier=scores)

    def score(self, requests: list[ScoreRequest]) -> list[RewardOutcome]:
        if self._in_process:  # no time limit: for debugging only
            return [self._outcome(r, *run_verifiers(r.completion, r.ground_truth, r.verifiers))
                    for r in requests]
        results: list[RewardOutcome | None] = [None] * len(requests)
        pending = deque(range(len(requests)))
        while pending or any(w.task is not None for w in self._workers):
            for w in self._workers:
                if w.task is None and pending:
                    w.task, w.started = pending.popleft(), time.monotonic()
                    r = requests[w.task]
                    w.conn.send((r.completion, r.ground_truth, r.verifiers))
            busy = [w for w in self._workers if w.task is not None]
            deadline = min(w.started for w in busy) + self.timeout_s
            ready = wait([w.conn for w in busy], timeout=max(deadline - time.monotonic(), 0))
            for i, w in enumerate(self._workers):
                if w.task is None:
                    continue
                req = requests[w.task]
                if w.conn in ready:
                    try:
                        results[w.task] = self._outcome(req, *w.conn.recv())
                        w.task = None
                        continue
                    except (EOFError, OSError):  # the worker died mid-request
                        results[w.task] = self._outcome(req, {}, "verifier process crashed")
                elif time.monotonic() - w.started >= self.timeout_s:
                    results[w.task] = self._outcome(req, {}, None, timed_out=True)
                else:
                    continue
                w.kill()
                self._workers[i] = _Worker(self._ctx)
                self._workers[i].wait_ready()
        return results  # type: ignore[return-value]

    def metrics_since_last(self) -> dict[str, float]:
        errors, timeouts = self.num_errors - self._reported[0], self.num_timeouts - self._reported[1]
        self._reported = (self.num_errors, self.num_timeouts)
        return {"reward/verifier_errors": float(errors), "reward/verifier_timeouts": float(timeouts)}

    def close(self) -> None:
        for w in self._workers:
            try:
                w.conn.send(None)
            except (BrokenPipeError, OSError):
                pass
            w.process.join(timeout=2)
            if w.process.is_alive():
                w.kill()
        self._workers = []
        self._in_process = False

    def __enter__(self) -> "RewardScorer":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def __del__(self) -> None:
        try:
            self.close()
        except Exception:  # noqa: BLE001  (interpreter shutdown)
            pass
