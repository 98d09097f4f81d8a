"""Sandbox slots and episode clocks: how tool calls share the CPU, and what an episode is
charged for.

`SandboxSlots` runs blocking sandbox calls (a `tool_use` Python call) on threads of its own, at
most `size` at once, `size` being the CPUs this process may run on. Why bounded: the sandbox
limits a call by wall-clock time, so a call is only timed fairly while it has a core to
itself. Run on the event loop's default pool (cores + 4 threads, shared with anything else
that uses `asyncio.to_thread`), 5 calls of `while True: pass` beside an honest call needing
2.2 s of CPU on 2 cores made the honest call run past a 5 s limit (docs/workflows.md). A call
waits for a free slot instead, and that wait is not its time.

`EpisodeClock` is an episode's time limit (`rollout.episode_timeout_s`) less the time its
calls waited for a slot, that is, for other episodes' calls: an episode is not dropped because
others' code was slow, and which episodes are dropped does not depend on how much they used the
tool. The wait is bounded (every call holding a slot is limited by the sandbox), so the limit
still ends a stuck episode; `waited_s` shows how far it was moved.

What it is not: a limit on the reward verifiers' sandboxes (`rewards.num_workers` processes
bound those), nor a CPU-time limit (the sandbox's own clock is the wall clock).
"""

from __future__ import annotations

import asyncio
import os
import time
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from typing import Callable, Iterator, TypeVar

T = TypeVar("T")


def usable_cpus() -> int:
    """The CPUs this process may run on (its affinity mask, e.g. a Slurm allocation)."""
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # not on Linux
        return os.cpu_count() or 1


class EpisodeClock:
    """`limit_s` of an episode's own time: wall time since it started, less the time any of its
    calls spent waiting for a sandbox slot (overlapping waits of its samples count once)."""

    def __init__(self, limit_s: float):
        self.limit_s = limit_s
        self._start = time.monotonic()
        self._waiting = 0  # calls of this episode waiting for a slot now
        self._since = 0.0  # when the first of them began to wait
        self._waited = 0.0  # finished waits

    @property
    def waited_s(self) -> float:
        now = time.monotonic()
        return self._waited + (now - self._since if self._waiting else 0.0)

    def left_s(self) -> float:
        """Seconds of its own time the episode has left (constant while it waits)."""
        return self.limit_s - (time.monotonic() - self._start - self.waited_s)

    @contextmanager
    def waiting(self) -> Iterator[None]:
        if not self._waiting:
            self._since = time.monotonic()
        self._waiting += 1
        try:
            yield
        finally:
            self._waiting -= 1
            if not self._waiting:
                self._waited += time.monotonic() - self._since


class SandboxSlots:
    """At most `size` blocking calls at once, on threads of their own; `close()` ends them."""

    def __init__(self, size: int | None = None):
        self.size = size or usable_cpus()
        self._executor = ThreadPoolExecutor(self.size, thread_name_prefix="rlvr-sandbox")
        self._free: asyncio.Semaphore | None = None  # made on the loop that first uses it

    async def run(self, clock: EpisodeClock | None, fn: Callable[..., T], *args,
                  **kwargs) -> T:
        """`fn(*args, **kwargs)` on a slot; the wait for one is charged to no one (`clock`)."""
        if self._free is None:
            self._free = asyncio.Semaphore(self.size)
        free, loop = self._free, asyncio.get_running_loop()
        with clock.waiting() if clock is not None else _no_wait():
            await free.acquire()
        try:
            job = self._executor.submit(fn, *args, **kwargs)
        except BaseException:
            free.release()
            raise
        # The slot is free when the thread is, not when a cancelled episode stops waiting.
        job.add_done_callback(lambda _: _call_soon(loop, free.release))
        return await asyncio.wrap_future(job)

    def close(self) -> None:
        self._executor.shutdown(wait=False, cancel_futures=True)


def _call_soon(loop: asyncio.AbstractEventLoop, fn: Callable[[], object]) -> None:
    try:
        loop.call_soon_threadsafe(fn)
    except RuntimeError:  # the loop is closed: no one waits for a slot any more
        pass


@contextmanager
def _no_wait() -> Iterator[None]:
    yield
