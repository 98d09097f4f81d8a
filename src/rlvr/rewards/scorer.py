"""Run verifiers on completions in worker processes, each request under a wall-clock time limit.

What it is: `RewardScorer.score(requests) -> outcomes`, one `RewardOutcome` per request, in order.
A verifier that raises, or returns what is no score (a str, None, NaN, a magnitude over
`batched.MAX_ABS_SCORE`: see `batched.checked_score`), scores 0 with the error text recorded; a
request that overruns the limit scores 0 with `timed_out` set, and its worker is killed and
replaced so a hung verifier (an infinite loop, a pathological LaTeX expression) stalls neither
this batch nor the next. Both are logged with the sample id and counted for
`metrics_since_last()`. Nothing a verifier does raises out of `score`.
What it is not: it knows nothing of tokens, truncation or advantages (see `penalties` and the
trainer), and it does not decide what a verifier checks (see `registry`).
A verifier that declares `prompt`, `trajectory` or `metadata` (see `registry`) gets them sent to
its worker with the request; others get only (completion, ground truth). Verifiers named in
`BATCHED_VERIFIERS` (the LLM judge) run in this process instead, one batch per `score` call,
beside the workers (`batched`); their errors and timeouts are counted the same way.

Why processes: a thread running a verifier cannot be stopped, and math-verify's own time limits
use `signal.alarm`, which only works on the main thread.
Why `subprocess` and not `multiprocessing` start methods: spawn and forkserver children re-import
the parent's `__main__` (for `rlvr train`, the CLI with torch: ~4 s and hundreds of MB per
worker), and fork copies a parent whose torch threads are running. A worker here is a fresh
interpreter that imports only `rlvr.rewards` and the modules that registered verifiers in the
parent, and talks to the parent over a socket pair with `multiprocessing.connection`; its side
is `rlvr.rewards.verifier_worker`.
Why `RewardOutcome` is imported inside a function: `rlvr.types` imports torch, and workers import
this module (the `rlvr.rewards` package does).
"""

from __future__ import annotations

import json
import logging
import os
import signal
import subprocess
import sys
import threading
import time
import weakref
from collections import deque
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from multiprocessing.connection import Pipe, wait
from typing import TYPE_CHECKING, Any, Callable, Mapping, Sequence

from rlvr.rewards.batched import BatchVerifier, Routing, combine, route, run_batched
from rlvr.rewards.format import answer_tags, mentions_answer_tags
from rlvr.rewards.registry import VERIFIERS, verifier_inputs
from rlvr.rewards.verifier_worker import run_verifiers

if TYPE_CHECKING:
    from rlvr.rewards.judge import JudgeSettings
    from rlvr.types import Prompt, RewardOutcome

log = logging.getLogger(__name__)

# How the scores of a request's verifiers (in the order named) combine into its reward.
AGGREGATORS: dict[str, Callable[[list[float]], float]] = {
    "last": lambda scores: scores[-1],
    "sum": lambda scores: float(sum(scores)),
}

WORKER_ADDRESS_SPACE_BYTES = 4 * 2**30  # a runaway expression raises MemoryError, not OOMs the host
WORKER_START_TIMEOUT_S = 60.0  # start-up (imports, warm-up) is not charged to any request
# Requests queued at a worker: the next one is already waiting when it finishes one, so a batch
# is not paced by process wake-ups. A timeout still costs only the running request: the ones
# queued behind it are sent again elsewhere, uncharged.
PIPELINE_DEPTH = 4
# A worker's whole program: the parent's import path first, so it finds what the parent finds.
_BOOTSTRAP = ("import json, sys; config = json.loads(sys.argv[1]); "
              "sys.path[:] = config['sys_path']; "
              "from rlvr.rewards.verifier_worker import serve; serve(config)")


@dataclass(frozen=True)
class ScorerSettings:
    """How a `RewardScorer` runs (`rewards.*`): a record, so it travels to a data-preparation
    actor as one picklable value."""

    num_workers: int = 2
    timeout_s: float = 5.0
    aggregator: str = "last"
    judge: JudgeSettings | None = None  # `rewards.judge`: the `llm_judge` verifier's model
    # The run asks for <think>/<answer> tags (its chat template or format reward): they mark
    # what is graded; else only where a request's prompt asks for them (`RewardScorer`).
    answer_tags: bool = True


@dataclass(frozen=True)
class ScoreRequest:
    """One completion to score with the verifiers its prompt names."""

    sample_id: str  # for logs: which sample failed
    completion: str
    ground_truth: str
    verifiers: tuple[str, ...]
    # What a verifier may also ask for (`registry.VERIFIER_INPUTS`): the prompt's messages, the
    # row's other fields (JSON), the episode's messages after the prompt (None: the completion
    # as the one assistant message).
    prompt_messages: tuple[dict[str, str], ...] = ()
    metadata_json: str = ""
    trajectory: tuple[dict[str, str], ...] | None = None

    @classmethod
    def for_prompt(cls, prompt: Prompt, k: int, completion: str,
                   trajectory: Sequence[dict[str, str]] | None = None) -> ScoreRequest:
        """The request for sample `k` of `prompt` (whose verifiers, truth and metadata it takes)."""
        return cls(sample_id=f"{prompt.id}#{k}", completion=completion,
                   ground_truth=prompt.ground_truth, verifiers=prompt.verifiers,
                   prompt_messages=tuple(prompt.messages), metadata_json=prompt.metadata_json,
                   trajectory=None if trajectory is None else tuple(dict(m) for m in trajectory))


def verifier_context(request: ScoreRequest) -> dict[str, Any] | None:
    """The extra inputs the request's verifiers declare, as plain values for the worker pipe;
    None when none asks. A name that cannot be resolved here asks for nothing: the worker
    reports it."""
    wanted: set[str] = set()
    for name in request.verifiers:
        try:
            wanted |= verifier_inputs(name)
        except Exception:  # noqa: BLE001  unknown or unimportable: the worker's error to report
            pass
    if not wanted:
        return None
    values = {
        "prompt": lambda: [dict(m) for m in request.prompt_messages],
        "metadata": lambda: json.loads(request.metadata_json) if request.metadata_json else {},
        "trajectory": lambda: ([dict(m) for m in request.trajectory]
                               if request.trajectory is not None
                               else [{"role": "assistant", "content": request.completion}]),
    }
    return {key: values[key]() for key in wanted}


# ---------------------------------------------------------------- in the parent process


class _Worker:
    """One worker process, the parent's end of its pipe, and the requests sent to it."""

    def __init__(self, config: dict[str, Any]) -> None:
        self.conn, child_conn = Pipe(duplex=True)
        fd = child_conn.fileno()
        config = dict(config, fd=fd, parent_pid=os.getpid())
        # A session of its own: Ctrl-C in a terminal reaches only the parent (which then kills
        # the workers), and killing the group also kills anything a verifier started.
        self.process = subprocess.Popen([sys.executable, "-c", _BOOTSTRAP, json.dumps(config)],
                                        pass_fds=(fd,), stdin=subprocess.DEVNULL,
                                        start_new_session=True)
        child_conn.close()
        self.ready = False
        self.started_at = time.monotonic()
        self.in_flight: deque[int] = deque()  # indices of requests sent; the first is running
        self.head_since = 0.0  # when the first in-flight request started, as far as we know

    def send(self, index: int, request: ScoreRequest, tags_mark_answers: bool) -> None:
        self.conn.send((request.completion, request.ground_truth, request.verifiers,
                        verifier_context(request), tags_mark_answers))
        if not self.in_flight:
            self.head_since = time.monotonic()
        self.in_flight.append(index)

    def finish_head(self) -> int:
        """The head request's answer arrived: the worker has moved on to the next one."""
        self.head_since = time.monotonic()
        return self.in_flight.popleft()

    def kill(self) -> int:
        """Kill the process group and reap the worker; its exit code."""
        try:
            # Before wait(): until it is reaped, even a dead worker's pid cannot be reused.
            os.killpg(self.process.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        code = self.process.wait(timeout=30)
        self.conn.close()
        return code


def _kill_workers(workers: list[_Worker]) -> None:
    for w in workers:
        w.kill()
    workers.clear()


def _plugin_modules() -> list[str]:
    """Modules (built-ins aside) that registered verifiers here: workers import them too."""
    modules: dict[str, None] = {}
    for name, verifier in VERIFIERS.items():
        module = getattr(verifier.score, "__module__", None) or "__main__"
        if module == "__main__":
            log.warning("verifier '%s' is defined in __main__, which worker processes do not "
                        "import: requests naming it will fail. Define it in a module listed "
                        "in experiment.plugins (docs/plugins.md).", name)
        elif module != "rlvr.rewards" and not module.startswith("rlvr.rewards."):
            modules[module] = None
    return list(modules)


class RewardScorer:
    """Scores `ScoreRequest`s into `RewardOutcome`s in `num_workers` processes.

    Each request gets `timeout_s` of wall-clock time from when its worker starts it (up to
    PIPELINE_DEPTH requests wait queued at a worker; waiting is not charged). Workers start in
    the background at construction and the first `score` waits for them (~1 s).
    `num_workers=0` scores in this process with NO time limit (a hung verifier hangs the caller):
    for debugging only.
    Workers import `rlvr.rewards` and every module that registered a verifier before this scorer
    was built; a verifier registered later, or defined in `__main__`, is unknown to them (naming
    it `package.module:function` works everywhere).
    `batched` maps batched verifier names (`llm_judge`) to the stages that score them here, in
    a thread beside the workers; the scorer closes them.
    Thread-safe: concurrent `score` calls run one after the other. Use as a context manager, or
    call `close()`; a scorer that is garbage-collected, or alive at interpreter exit, kills its workers too.
    """

    def __init__(self, num_workers: int = 2, timeout_s: float = 5.0, aggregator: str = "last",
                 batched: Mapping[str, BatchVerifier] | None = None, answer_tags: bool = True):
        if aggregator not in AGGREGATORS:
            raise ValueError(f"unknown reward aggregator '{aggregator}'; known: "
                             f"{', '.join(AGGREGATORS)}")
        if num_workers < 0 or not timeout_s > 0:
            raise ValueError(f"need num_workers >= 0 and timeout_s > 0, got {num_workers}, "
                             f"{timeout_s}")
        self.num_workers = num_workers
        self.timeout_s = timeout_s
        self.aggregator = aggregator
        self.answer_tags = answer_tags  # ScorerSettings.answer_tags
        self.num_errors = 0  # running totals since construction
        self.num_timeouts = 0
        self._reported = (0, 0)  # totals at the last metrics_since_last()
        self._seconds = 0.0  # spent in score() since the last metrics_since_last()
        self._closed = False
        self._lock = threading.Lock()  # score() from the producer thread and from eval: in turn
        self._worker_config = {"sys_path": [str(p) for p in sys.path],
                               "modules": _plugin_modules() if num_workers else [],
                               "address_space_bytes": WORKER_ADDRESS_SPACE_BYTES}
        self._workers = [_Worker(self._worker_config) for _ in range(num_workers)]
        self._batched = dict(batched or {})
        self._batched_pool = ThreadPoolExecutor(1, thread_name_prefix="rlvr-batched-verifiers")
        # Holds the list (replaced workers are swapped in place), never self.
        self._finalizer = weakref.finalize(self, _kill_workers, self._workers)

    @classmethod
    def from_settings(cls, settings: ScorerSettings) -> "RewardScorer":
        batched: dict[str, BatchVerifier] = {}
        if settings.judge is not None:  # loads the judge's model, or checks its endpoint's key
            from rlvr.rewards.judge import JUDGE_VERIFIER, JudgeScorer

            batched[JUDGE_VERIFIER] = JudgeScorer.from_settings(settings.judge)
        return cls(settings.num_workers, settings.timeout_s, settings.aggregator, batched,
                   settings.answer_tags)

    def tags_mark_answers(self, prompt_messages: Sequence[Mapping[str, Any]]) -> bool:
        """Whether <think>/<answer> tags mark the graded part of a completion of the prompt
        `prompt_messages`: the run asks for them, or the prompt does. Else they are text like
        any other."""
        return self.answer_tags or any(mentions_answer_tags(m.get("content") or "")
                                       for m in prompt_messages)

    def score(self, requests: list[ScoreRequest]) -> list[RewardOutcome]:
        """One outcome per request, in order. Raises only if a worker cannot start at all.
        Callers in several threads are served one at a time."""
        with self._lock:
            start = time.perf_counter()
            try:
                return self._score(requests)
            finally:
                self._seconds += time.perf_counter() - start

    def _score(self, requests: list[ScoreRequest]) -> list[RewardOutcome]:
        if self._closed:
            raise RuntimeError("score() on a closed RewardScorer")
        routing = route(requests)
        judged = (self._batched_pool.submit(self._run_batched, requests, routing)
                  if routing.batched else None)
        try:
            parts = dict(zip(routing.worker_index, self._run_workers(routing.worker_requests)))
        finally:  # the batched stage bounds its own time
            batched = judged.result() if judged is not None else {}
        return [self._outcome(r, *combine(r.verifiers, parts.get(i),
                                          {name: results[i] for name, results in batched.items()
                                           if i in results}))
                for i, r in enumerate(requests)]

    def _run_batched(self, requests: list[ScoreRequest], routing: Routing) -> dict:
        """The batched stages' results, each request read with its own `tags_mark_answers`,
        as the workers read it: a stage scores a batch under one setting (a context variable,
        set in the pool's thread and staying there), so the requests are split by it, into
        at most two calls a stage. Under the run-level setting alone, a prompt that asked for
        the tags had its judge see the thinking as the answer."""
        marks = [self.tags_mark_answers(r.prompt_messages) for r in requests]
        out: dict = {}
        for mark in (True, False):
            part = Routing(batched={name: [i for i in indices if marks[i] is mark]
                                    for name, indices in routing.batched.items()})
            part.batched = {name: indices for name, indices in part.batched.items() if indices}
            if not part.batched:
                continue
            with answer_tags(mark):
                for name, results in run_batched(requests, part, self._batched).items():
                    out.setdefault(name, {}).update(results)
        return out

    def _run_workers(self, requests: list[ScoreRequest]
                     ) -> list[tuple[list[float], str | None, bool]]:
        """(scores, error text, timed out) of each request, from the worker processes."""
        if self.num_workers == 0:  # in this process, unbounded: for debugging
            return [(*run_verifiers(r.completion, r.ground_truth, r.verifiers,
                                    verifier_context(r), self.tags_mark_answers(r.prompt_messages)), False)
                    for r in requests]
        outcomes: list[tuple | None] = [None] * len(requests)
        pending = deque(range(len(requests)))
        try:
            while pending or any(w.in_flight for w in self._workers):
                self._dispatch(requests, pending)
                self._collect(requests, outcomes, pending)
        finally:
            # Only after an exception (Ctrl-C, a worker that cannot start): a worker still busy
            # would answer its stale requests into the next batch.
            for w in [w for w in self._workers if w.in_flight]:
                self._replace(w)
        return outcomes  # type: ignore[return-value]  (every slot is filled by now)

    def _dispatch(self, requests: list[ScoreRequest], pending: deque[int]) -> None:
        """Keep up to PIPELINE_DEPTH requests queued at each ready worker."""
        for w in list(self._workers):
            while pending and w.ready and len(w.in_flight) < PIPELINE_DEPTH:
                index = pending.popleft()
                try:
                    w.send(index, requests[index],
                           self.tags_mark_answers(requests[index].prompt_messages))
                except OSError:  # the worker died: not this request's fault
                    pending.appendleft(index)
                    if not w.in_flight:  # died idle; else _collect sees it die mid-request
                        self._replace(w)
                    break

    def _collect(self, requests: list[ScoreRequest], outcomes: list, pending: deque[int]) -> None:
        """Wait for the first answer or deadline, then handle every worker that has one."""
        waiting = [w for w in self._workers if w.in_flight or not w.ready]
        deadline = min(self._deadline(w) for w in waiting)
        ready = wait([w.conn for w in waiting], timeout=max(0.0, deadline - time.monotonic()))
        now = time.monotonic()
        for w in waiting:
            if w.conn in ready or w.conn.poll():  # poll: an answer that came after the wait
                self._receive(w, requests, outcomes, pending)
            elif now >= self._deadline(w) and not w.ready:
                raise RuntimeError(f"a verifier worker did not start in {WORKER_START_TIMEOUT_S} s")
            elif now >= self._deadline(w):
                index = w.in_flight.popleft()
                self._abandon(w, pending)
                outcomes[index] = ([], None, True)

    def _deadline(self, w: _Worker) -> float:
        if not w.ready:
            return w.started_at + WORKER_START_TIMEOUT_S
        return w.head_since + self.timeout_s

    def _receive(self, w: _Worker, requests: list[ScoreRequest], outcomes: list,
                 pending: deque[int]) -> None:
        if not w.ready:
            self._start_message(w)
            return
        while True:  # drain every answer already sent: one wake-up, several results
            try:
                message = w.conn.recv()
            except (EOFError, OSError):  # the worker died while running the head request
                index = w.in_flight.popleft()
                code = self._abandon(w, pending)
                outcomes[index] = ([], f"verifier process died (exit code {code})", False)
                return
            index = w.finish_head()
            outcomes[index] = (*message, False)
            if not w.in_flight or not w.conn.poll():
                return

    def _start_message(self, w: _Worker) -> None:
        try:
            message = w.conn.recv()
        except (EOFError, OSError):
            message = None
        if message is None or message[0] != "ready":
            code = self._replace(w)
            detail = message[1] if message else f"exit code {code}"
            raise RuntimeError(f"a verifier worker failed to start: {detail}")
        w.ready = True

    def _abandon(self, w: _Worker, pending: deque[int]) -> int:
        """Replace `w`; the requests queued behind its head never started: send them again."""
        pending.extendleft(reversed(w.in_flight))
        w.in_flight.clear()
        return self._replace(w)

    def _replace(self, w: _Worker) -> int:
        """Kill `w`, start a fresh worker in its place; `w`'s exit code."""
        code = w.kill()
        self._workers[self._workers.index(w)] = _Worker(self._worker_config)
        return code

    def _outcome(self, request: ScoreRequest, scores: list[float], error: str | None,
                 timed_out: bool = False) -> RewardOutcome:
        from rlvr.types import RewardOutcome  # here, not at the top: see the module docstring

        # The first failure since the last report is printed whole; the others are counted and
        # summed up once per step (`metrics_since_last`): a broken verifier fails every sample,
        # and a line per sample buried the console.
        if timed_out:
            self.num_timeouts += 1
            first = self.num_timeouts - self._reported[1] == 1
            (log.warning if first else log.debug)(
                "verifiers %s timed out on sample %s (a worker's limit is %.1f s; it was "
                "replaced)", ",".join(request.verifiers), request.sample_id, self.timeout_s)
        elif error:
            self.num_errors += 1
            first = self.num_errors - self._reported[0] == 1
            (log.warning if first else log.debug)("verifier error on sample %s: %s",
                                                  request.sample_id, error)
        return RewardOutcome(score=AGGREGATORS[self.aggregator](scores) if scores else 0.0,
                             error=error, timed_out=timed_out,
                             per_verifier=dict(zip(request.verifiers, scores)))

    def metrics_since_last(self) -> dict[str, float]:
        """Errors, timeouts and seconds spent scoring since the previous call (or
        construction). The seconds are part of the caller's generation time: episodes are
        scored as they finish, within the step's rollout."""
        errors = self.num_errors - self._reported[0]
        timeouts = self.num_timeouts - self._reported[1]
        self._reported = (self.num_errors, self.num_timeouts)
        if errors > 1 or timeouts > 1:  # the first of each was printed as it happened
            log.warning("%d verifier errors and %d timeouts in this step (the first of each "
                        "printed above; reward/verifier_errors, reward/verifier_timeouts)",
                        errors, timeouts)
        seconds, self._seconds = self._seconds, 0.0
        return {"reward/verifier_errors": errors, "reward/verifier_timeouts": timeouts,
                "time/scoring": seconds}

    def close(self) -> None:
        """Kill the workers (they hold no state worth a graceful stop) and close the batched
        stages. Idempotent."""
        self._closed = True
        self._finalizer()
        self._batched_pool.shutdown(wait=False)
        stages, self._batched = list(self._batched.values()), {}
        for stage in stages:
            stage.close()

    def __enter__(self) -> RewardScorer:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()
