"""Generation ahead of training: a producer thread makes scored batches, at most `async_steps`
ahead, while the trainer trains on earlier ones.

What it is: `RolloutProducer(produce, async_steps)`: `produce()` makes one step's batch (generate
and score); the producer thread calls it again and again, blocking when `async_steps` batches
are ahead of the trainer, queued or being made (backpressure). Batches are never more than
`async_steps` versions behind the policy that trains on them, so none need dropping.
`next_batch()` hands the trainer the oldest. Time each side spends blocked on the other is
measured (`time/generation_waiting_for_trainer`,
`time/trainer_waiting_for_data`).
What it is not: it does not decide what is too stale (`producer.staleness`, applied by the
trainer, which knows the policy version) or when weights move (the trainer pushes them after
each update; the engine loads them between calls, or between tokens with `inflight_updates`).

Exact resume: `mark()` (the trainer passes the mixer's state) is recorded before each batch is
made, and `ahead()` gives what a training state must hold to continue the same run: the batches
made and not yet taken (with the policy versions in their samples) and the mark where the first
batch not yet made starts; a resumed producer gets those batches back (`made`) and hands them
out first. Batches are made with the weights of their time, so a batch in the making is waited
for (`ahead(wait=True)`), not dropped: made again after a resume, with newer weights, it would
differ. `rlvr.producer.ahead_state` writes them as JSON.

Why a thread, not a process: the engine and the learner share this process's memory (the
colocated default), and both spend their time in torch ops that release the GIL.
Shutdown: `close()` stops the thread at its next check; a `produce` that raises re-raises in
the trainer at its next `next_batch()`, so a failing engine stops the run instead of starving it.
"""

from __future__ import annotations

import queue
import threading
import time
from dataclasses import dataclass
from typing import Any, Callable, Generic, Sequence, TypeVar


T = TypeVar("T")


@dataclass
class Produced(Generic[T]):
    item: T
    seconds: float  # time `produce` took
    mark: Any = None  # what `mark()` returned just before it was made


@dataclass
class Ahead(Generic[T]):
    """What the producer holds ahead of the trainer, for a training state."""

    made: list[Produced[T]]  # made, not yet taken, oldest first
    mark: Any  # `mark()` where the first batch not in `made` starts
    complete: bool  # False: a batch was being made, and a resume will make it again
    failed: bool = False  # the producer raised: `made` holds what came before, `mark` is
    # where the failed batch's draw began


class RolloutProducer(Generic[T]):
    def __init__(self, produce: Callable[[], T], async_steps: int,
                 mark: Callable[[], Any] | None = None, made: Sequence[Produced[T]] = ()):
        """`mark()` is called in the producer thread before each `produce()`; `made`: batches
        a resumed run had made ahead (at most `async_steps`), handed out first."""
        if async_steps < 1:
            raise ValueError("a producer thread needs async_steps >= 1; 0 runs inline")
        if len(made) > async_steps:
            raise ValueError(f"{len(made)} batches made ahead, more than async_steps="
                             f"{async_steps}")
        self._produce = produce
        self._mark = mark
        self.async_steps = async_steps
        # A slot is taken BEFORE generating and freed when the trainer takes a batch, so at most
        # `async_steps` batches exist ahead of the trainer, finished or in progress. Bounding
        # only the finished ones would let the producer hold one more batch made with old
        # weights while it waits, one version staler than the bound: dropped, generation wasted.
        self._slots = threading.Semaphore(async_steps - len(made))
        self._queue: queue.Queue[Produced[T] | BaseException] = queue.Queue()
        for batch in made:
            self._queue.put(batch)
        # Held while a batch's mark is taken and while it enters the queue, so `ahead()` sees
        # either a batch in the making (with its mark) or none and the mark of the next.
        self._lock = threading.Lock()
        self._making = False
        self._making_mark: Any = None
        # Whether `produce` raised, and the mark of that batch; kept after the trainer has
        # taken the error from the queue (it saves its state after that).
        self._failed, self._failed_mark = False, None
        self._stop = threading.Event()
        self._blocked_s = 0.0  # total time the producer waited for a free slot (the trainer)
        self._reported_blocked_s = 0.0
        self._blocked_since: float | None = None  # start of the wait in progress, if any
        self._thread = threading.Thread(target=self._run, name="rollout-producer", daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while self._take_slot():
            with self._lock:
                mark = self._mark() if self._mark is not None else None
                self._making, self._making_mark = True, mark
            try:
                start = time.perf_counter()
                item = self._produce()
                made = time.perf_counter()
            except BaseException as e:  # noqa: BLE001  handed to the trainer, which re-raises
                with self._lock:
                    self._queue.put(e)
                    # The failed batch's prompts were drawn: a state must start before them,
                    # or a resume would skip them (the mixer has moved past).
                    self._making, self._failed, self._failed_mark = False, True, mark
                return
            with self._lock:
                self._queue.put(Produced(item, made - start, mark))
                self._making = False

    def _take_slot(self) -> bool:
        """Wait until fewer than `async_steps` batches are ahead; False once stopped."""
        start = self._blocked_since = time.perf_counter()
        try:
            while not self._stop.is_set():
                if self._slots.acquire(timeout=0.1):
                    return True
            return False
        finally:
            self._blocked_s += time.perf_counter() - start  # only this thread writes it
            self._blocked_since = None

    def blocked_since_last(self) -> float:
        """Seconds the producer waited for the trainer since the previous call, counting a wait
        still in progress (total stays monotonic: a finished wait adds what was counted live)."""
        # Finished waits first: a wait ending between the two reads is then counted later,
        # not twice.
        done = self._blocked_s
        since = self._blocked_since
        total = done + (time.perf_counter() - since if since is not None else 0.0)
        total = max(total, self._reported_blocked_s)
        delta, self._reported_blocked_s = total - self._reported_blocked_s, total
        return delta

    def next_batch(self, timeout_s: float | None = None,
                   should_stop: Callable[[], bool] | None = None
                   ) -> tuple[Produced[T] | None, float]:
        """The oldest batch and how long the trainer waited for it; (None, waited) as soon as
        `should_stop()` turns true while waiting (a stop signal must not wait for generation)."""
        start = time.perf_counter()
        deadline = None if timeout_s is None else start + timeout_s
        while True:
            if not self._thread.is_alive() and self._queue.empty():
                raise RuntimeError("the rollout producer stopped without an error")
            try:
                value = self._queue.get(timeout=0.1)
                break
            except queue.Empty:
                if should_stop is not None and should_stop():
                    return None, time.perf_counter() - start
                if deadline is not None and time.perf_counter() > deadline:
                    raise TimeoutError(f"no rollout batch within {timeout_s} s") from None
        if isinstance(value, BaseException):
            raise RuntimeError("rollout generation failed") from value
        self._slots.release()  # the producer may start the next batch, with current weights
        return value, time.perf_counter() - start

    def ahead(self, wait: bool = True, should_stop: Callable[[], bool] | None = None) -> Ahead[T]:
        """The batches made and not yet taken, and the mark of the next. With `wait`, first
        waits until every slot holds a finished batch (the producer then waits for the
        trainer), so that no batch is half made; `should_stop()` turning true, or the producer
        ending, cuts the wait short (the result then says it is not complete)."""
        while wait and not self._full() and self._thread.is_alive():
            if should_stop is not None and should_stop():
                break
            time.sleep(0.05)
        with self._lock:
            queued = list(self._queue.queue)
            made = [q for q in queued if isinstance(q, Produced)]
            failed = self._failed
            if self._making:
                mark, complete = self._making_mark, False
            elif failed:  # made again after a resume, from where its draw began
                mark, complete = self._failed_mark, False
            else:
                mark = self._mark() if self._mark is not None else None
                complete = True
        return Ahead(made, mark, complete, failed)

    def _full(self) -> bool:
        with self._lock:
            return not self._making and self._queue.qsize() >= self.async_steps

    def close(self, timeout_s: float = 60.0) -> None:
        """Stop producing; waits for the batch in progress to finish (up to `timeout_s`)."""
        self._stop.set()
        self._thread.join(timeout_s)

    def __enter__(self) -> RolloutProducer[T]:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()
