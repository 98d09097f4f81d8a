"""`await client.generate(prompt_ids, params)`: many concurrent episodes over one engine.

Episodes (`rlvr.workflows`) are coroutines on one event loop; each awaits the engine whenever it
wants a turn. An engine with its own scheduler (`AsyncRolloutEngine`: a remote server, a
serving engine's async front) is awaited directly. A batch engine (`generate(prompts, params)`:
the in-process engines, a group of engine actors) is driven by a `Coalescer`, which gathers
the requests of all episodes into one `generate` call per sampling setting.

When a coalescer calls its batch function decides both speed and reproducibility. It calls it
when every live episode is waiting on some coalescer (the engine's or the scorer's), or has
finished: then no request can still join the batch, so the batch is as large as it can be, and
its content depends only on what the episodes did, never on how fast a tool or a verifier ran.
With one-turn episodes that is exactly one `generate` call with every prompt of the step, the
same call the trainer made before workflows existed, so those runs reproduce bit for bit.
Calls made outside any episode (evaluation, scripts) go out at once. So that one episode busy
for long (a hanging tool, a slow judge) cannot stall the others, a request also goes out once it
has waited `max_wait_s`; only then does timing shape a batch.

One batch per coalescer is in flight at a time; it runs off the loop so the loop stays free for
episodes that are running tools or scoring. The engine's batches run on the thread that waits
for the step (`CallerThreadExecutor`, served by `EpisodeRunner.run`), not on a thread of their
own: see that class for why.
"""

from __future__ import annotations

import asyncio
import contextvars
import itertools
import queue
from concurrent.futures import Executor, Future, ThreadPoolExecutor
from dataclasses import dataclass, field, replace
from typing import Any, Callable, Hashable, Sequence

from rlvr.rollout.base import AsyncRolloutEngine, RolloutEngine
from rlvr.rollout.seeds import derive_seed
from rlvr.types import Completion, SamplingParams

# The episode a coroutine (and every task it starts, which copy the context) belongs to.
current_episode: contextvars.ContextVar[int | None] = contextvars.ContextVar(
    "rlvr_episode", default=None)
# Its prompt's position in the step's batch: an engine that schedules requests itself gets
# each episode's own seed from it, the seed a batch engine derives from the same position.
episode_position: contextvars.ContextVar[int | None] = contextvars.ContextVar(
    "rlvr_episode_position", default=None)
_NONE = -1  # an unknown position or sample in a request's order key: sorts first


class BatchCallFailed(RuntimeError):
    """The engine or the scorer behind a coalescer raised: a failure of the run's machinery,
    not of the episode that happened to wait on it, so the runner stops instead of counting."""


class EpisodeTracker:
    """Which episodes are alive and how many calls each is waiting on; coalescers ask it
    whether every live episode is waiting (then nothing more can join a batch)."""

    def __init__(self) -> None:
        self._waiting: dict[int, int] = {}  # live episode -> calls it awaits
        self._listeners: list[Callable[[], None]] = []
        self._ids = itertools.count()

    def start(self) -> int:
        episode = next(self._ids)
        self._waiting[episode] = 0
        return episode

    def finish(self, episode: int) -> None:
        self._waiting.pop(episode, None)
        self._changed()

    def wait(self, episode: int | None, delta: int) -> None:
        if episode in self._waiting:
            self._waiting[episode] += delta
        self._changed()

    def all_waiting(self) -> bool:
        return all(n > 0 for n in self._waiting.values())

    def listen(self, callback: Callable[[], None]) -> None:
        self._listeners.append(callback)

    def _changed(self) -> None:
        for callback in self._listeners:
            callback()


@dataclass
class _Call:
    key: Hashable
    item: Any
    future: asyncio.Future
    episode: int | None = field(default=None)


class CallerThreadExecutor(Executor):
    """Runs each submitted call on the thread blocked in `serve_until(outcome)`, instead of on a
    thread of its own; one serving thread at a time.

    Why: torch computes with OpenMP, and libgomp gives every thread that starts parallel work a
    team of worker threads that lives as long as that thread does. Once a process holds more
    such workers than it has cores, libgomp stops letting idle workers spin and puts them to
    sleep at once (its "throttled" wait), so each of the thousands of small parallel ops of a
    forward pass or a decode step waits for a worker to wake. An engine decoding on a thread of
    its own gave the process that second team for good: from the first batch on, the engine
    decoded the quick-start batch at 465 tokens/s instead of 725 and the learner's update took
    4.34 s instead of 3.67, its worker thread busy 0.64 of the time instead of 0.96 (2-core Xeon,
    `benchmarks/engine_thread.py`). Decoding on the thread that waits for the step, the
    trainer's in a synchronous run, the engine shares the learner's team. (With generation
    ahead of training the producer thread waits, and two teams really do compute at once.)
    """

    def __init__(self) -> None:
        self._jobs: queue.SimpleQueue = queue.SimpleQueue()

    def submit(self, fn: Callable[..., Any], /, *args: Any, **kwargs: Any) -> Future:
        future: Future = Future()
        self._jobs.put((future, fn, args, kwargs))
        return future

    def serve_until(self, outcome: Future) -> Any:
        """Run submitted calls here until `outcome` is done; its result (or its error). Calls
        still queued then are cancelled: everyone who could wait for them has finished."""
        outcome.add_done_callback(lambda _: self._jobs.put(None))  # wakes the get() below
        try:
            while not outcome.done():
                job = self._jobs.get()
                if job is not None:
                    _run_job(*job)
        finally:  # also when a KeyboardInterrupt leaves a job
            self._cancel_queued()
        return outcome.result()

    def shutdown(self, wait: bool = True, *, cancel_futures: bool = False) -> None:
        self._cancel_queued()

    def _cancel_queued(self) -> None:
        while True:
            try:
                job = self._jobs.get_nowait()
            except queue.Empty:
                return
            if job is not None:
                job[0].cancel()


def _run_job(future: Future, fn: Callable[..., Any], args: tuple, kwargs: dict) -> None:
    if not future.set_running_or_notify_cancel():
        return
    try:
        result = fn(*args, **kwargs)
    except Exception as e:  # noqa: BLE001  handed to whoever awaits the call
        future.set_exception(e)
    except BaseException:  # KeyboardInterrupt, SystemExit: the serving thread's to raise, so
        # the awaiting side gets an error instead (in the loop's thread it would end the loop).
        future.set_exception(RuntimeError("the thread running this call was interrupted"))
        raise
    else:
        future.set_result(result)


class Coalescer:
    """Gathers `submit(key, item)` calls into `batch_fn(key, items) -> results` (one result per
    item, in order), one call per key, keys in the order they first appeared. Batches run on
    `executor`, by default a thread of the coalescer's own."""

    def __init__(self, batch_fn: Callable[[Hashable, list[Any]], Sequence[Any]],
                 tracker: EpisodeTracker, name: str, max_wait_s: float = 1.0,
                 executor: Executor | None = None):
        self._batch_fn = batch_fn
        self._max_wait_s = max_wait_s
        self._oldest: float | None = None  # loop time the oldest pending call arrived
        self._tracker = tracker
        self._name = name
        self._pending: list[_Call] = []
        self._busy = False
        self._check_scheduled = False
        self._loop: asyncio.AbstractEventLoop | None = None
        # One at a time either way: batches of one coalescer never overlap (an engine decodes one
        # batch at a time); `_busy` keeps a second from starting.
        self._executor = executor or ThreadPoolExecutor(1, thread_name_prefix=f"rlvr-{name}")
        tracker.listen(self._schedule_check)

    async def submit(self, key: Hashable, item: Any) -> Any:
        self._loop = asyncio.get_running_loop()
        call = _Call(key, item, self._loop.create_future(), current_episode.get())
        self._pending.append(call)
        if self._oldest is None:
            self._oldest = self._loop.time()
            self._loop.call_later(self._max_wait_s, self._schedule_check)
        self._tracker.wait(call.episode, +1)
        try:
            return await call.future
        finally:  # also on cancellation: a cancelled call is skipped at the next flush
            self._tracker.wait(call.episode, -1)

    def close(self) -> None:
        self._executor.shutdown(wait=False, cancel_futures=True)

    def _schedule_check(self) -> None:
        # After the ready callbacks: tasks started together (asyncio.gather) all submit first.
        if self._loop is not None and not self._check_scheduled:
            self._check_scheduled = True
            self._loop.call_soon(self._check)

    def _check(self) -> None:
        self._check_scheduled = False
        self._pending = [c for c in self._pending if not c.future.done()]
        if not self._pending:
            self._oldest = None
        if self._busy or not self._pending:
            return
        overdue = self._loop.time() - self._oldest >= self._max_wait_s
        if not (overdue or self._tracker.all_waiting()):
            return
        calls, self._pending, self._oldest = self._pending, [], None
        self._busy = True
        asyncio.ensure_future(self._run(calls))

    async def _run(self, calls: list[_Call]) -> None:
        by_key: dict[Hashable, list[_Call]] = {}
        for call in calls:
            by_key.setdefault(call.key, []).append(call)
        try:
            for key, group in by_key.items():
                try:
                    results = await self._loop.run_in_executor(
                        self._executor, self._batch_fn, key, [c.item for c in group])
                except Exception as e:  # noqa: BLE001  handed to every waiting episode
                    error = BatchCallFailed(f"{self._name} failed: {e}")
                    error.__cause__ = e
                    for call in group:
                        if not call.future.done():
                            call.future.set_exception(error)
                    continue
                for call, result in zip(group, results):
                    if not call.future.done():
                        call.future.set_result(result)
        finally:
            self._busy = False
            self._schedule_check()


class EngineClient:
    """The async face of any engine: `await generate(prompt_ids, params)` -> `params.n`
    completions of one prompt. A batch engine's calls run on `executor` (see `Coalescer`).

    Seeds. A request is known by its episode's prompt position and, for a later turn of one
    sample of the group, that sample's index (`sample`). An engine that schedules requests
    itself gets a seed per (params.seed, position, sample), so every sample of every prompt
    draws its own stream and a resumed run draws the same ones. A batch engine seeds the i-th
    prompt of a `generate` call from (params.seed, i) (`derive_seed(seed, prompt=i)`), so a call's
    requests are put in (position, sample) order, not in the order they arrived (which a tool's
    running time decides); a call of later turns takes its seed from its first request, so two
    calls that share a turn's seed (sent apart, or with different `max_tokens`) still draw
    different streams."""

    def __init__(self, engine: RolloutEngine, tracker: EpisodeTracker | None = None,
                 max_wait_s: float = 1.0, executor: Executor | None = None):
        self.engine = engine
        self.tracker = tracker or EpisodeTracker()
        self._native = isinstance(engine, AsyncRolloutEngine)
        self._coalescer = None if self._native else Coalescer(
            self._generate_batch, self.tracker, "engine", max_wait_s, executor)

    async def generate(self, prompt_ids: Sequence[int], params: SamplingParams,
                       sample: int | None = None) -> list[Completion]:
        """`sample`: which of the group's samples this request continues (None: a request for
        the whole group, such as the first turn)."""
        position = episode_position.get()
        if self._native:  # the engine batches; the tracker still counts the wait (for the
            episode = current_episode.get()  # scorer's coalescer, which asks who is waiting)
            if params.seed is not None and position is not None:
                where = {"prompt": position} if sample is None else {"prompt": position,
                                                                    "sample": sample}
                params = replace(params, seed=derive_seed(params.seed, **where))
            self.tracker.wait(episode, +1)
            try:
                return await self.engine.agenerate(list(prompt_ids), params)  # type: ignore[attr-defined]
            finally:
                self.tracker.wait(episode, -1)
        order = (_NONE if position is None else position, _NONE if sample is None else sample)
        return await self._coalescer.submit(params, (order, list(prompt_ids)))

    def close(self) -> None:
        """Stops the batching thread; the engine is its builder's to close."""
        if self._coalescer is not None:
            self._coalescer.close()

    def _generate_batch(self, params: SamplingParams,
                        requests: list[tuple[tuple[int, int], list[int]]]
                        ) -> list[list[Completion]]:
        # Stable: requests made outside episodes keep their order of arrival.
        order = sorted(range(len(requests)), key=lambda i: requests[i][0])
        (position, sample), _ = requests[order[0]]
        if params.seed is not None and sample != _NONE:
            params = replace(params, seed=derive_seed(params.seed, prompt=position,
                                                      sample=sample))
        results = self.engine.generate([requests[i][1] for i in order], params)
        out: list[list[Completion]] = [[] for _ in requests]
        for i, result in zip(order, results):
            out[i] = result
        return out
