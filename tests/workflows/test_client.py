"""Coalescing the engine calls of concurrent episodes: one batch when all wait, in order."""

import asyncio
import threading
from concurrent.futures import Future

import pytest

from rlvr.rollout.client import (BatchCallFailed, CallerThreadExecutor, Coalescer, EngineClient,
                                 EpisodeTracker, current_episode)
from rlvr.types import Completion, SamplingParams


class RecordingEngine:
    def __init__(self, fail=False):
        self.calls, self.fail = [], fail

    def generate(self, prompts, params):
        self.calls.append(([list(p) for p in prompts], params))
        if self.fail:
            raise RuntimeError("engine died")
        return [[Completion([p[0] * 10 + k], [-0.5], "stop", f"{p[0]}.{k}")
                 for k in range(params.n)] for p in prompts]


async def _episodes(tracker, bodies):
    async def one(body):
        episode = tracker.start()
        current_episode.set(episode)
        try:
            return await body()
        finally:
            tracker.finish(episode)
    return await asyncio.gather(*(one(b) for b in bodies))


def test_concurrent_episodes_share_one_generate_call_in_episode_order():
    engine = RecordingEngine()
    client = EngineClient(engine)
    params = SamplingParams(n=2, seed=1)
    results = asyncio.run(_episodes(client.tracker, [
        (lambda i=i: client.generate([i], params)) for i in range(5)]))
    assert len(engine.calls) == 1 and engine.calls[0][0] == [[0], [1], [2], [3], [4]]
    assert [[c.text for c in r] for r in results][3] == ["3.0", "3.1"]
    client.close()


def test_a_batch_waits_for_an_episode_that_is_busy_elsewhere():
    # Episode 1 "runs a tool" (sleeps) before it asks: the batch waits for it, so what is
    # batched never depends on how long a tool takes.
    engine = RecordingEngine()
    client = EngineClient(engine)
    params = SamplingParams(n=1)

    async def slow():
        await asyncio.sleep(0.2)
        return await client.generate([1], params)

    asyncio.run(_episodes(client.tracker, [lambda: client.generate([0], params), slow]))
    assert [c[0] for c in engine.calls] == [[[0], [1]]]
    client.close()


def test_different_sampling_settings_make_separate_calls_and_outside_calls_go_at_once():
    engine = RecordingEngine()
    client = EngineClient(engine)
    a, b = SamplingParams(n=1, seed=1), SamplingParams(n=1, seed=2)
    asyncio.run(_episodes(client.tracker, [lambda: client.generate([0], a),
                                           lambda: client.generate([1], b),
                                           lambda: client.generate([2], a)]))
    assert [(c[0], c[1].seed) for c in engine.calls] == [([[0], [2]], 1), ([[1]], 2)]
    out = asyncio.run(client.generate([7], a))  # no episode: nothing to wait for
    assert out[0].text == "7.0"
    client.close()


def test_an_engine_failure_reaches_every_waiting_episode():
    client = EngineClient(RecordingEngine(fail=True))
    with pytest.raises(BatchCallFailed, match="engine died"):
        asyncio.run(_episodes(client.tracker, [
            lambda: client.generate([0], SamplingParams()),
            lambda: client.generate([1], SamplingParams())]))
    client.close()


def test_a_cancelled_call_is_left_out_of_the_batch():
    calls = []
    tracker = EpisodeTracker()
    coalescer = Coalescer(lambda key, items: calls.append(items) or items, tracker, "test")

    async def main():
        task = asyncio.ensure_future(coalescer.submit(None, "cancelled"))
        await asyncio.sleep(0)
        task.cancel()
        return await coalescer.submit(None, "kept")

    assert asyncio.run(main()) == "kept"
    assert calls == [["kept"]]
    coalescer.close()


def test_calls_run_on_the_thread_that_serves_and_errors_reach_their_caller():
    executor = CallerThreadExecutor()
    ran_on = []

    def job(x):
        ran_on.append(threading.get_ident())
        if x == "bad":
            raise ValueError("bad input")
        return x * 2

    async def episodes():
        loop = asyncio.get_running_loop()
        good = await loop.run_in_executor(executor, job, "a")
        with pytest.raises(ValueError, match="bad input"):
            await loop.run_in_executor(executor, job, "bad")
        return good

    # The event loop runs on a thread of its own (as in EpisodeRunner); this thread serves.
    loop = asyncio.new_event_loop()
    threading.Thread(target=loop.run_forever, daemon=True).start()
    outcome = asyncio.run_coroutine_threadsafe(episodes(), loop)
    assert executor.serve_until(outcome) == "aa"
    assert ran_on == [threading.get_ident()] * 2
    loop.call_soon_threadsafe(loop.stop)


def test_calls_left_when_the_outcome_is_done_are_cancelled_not_run():
    executor = CallerThreadExecutor()
    outcome = Future()
    outcome.set_result("done")
    left = executor.submit(lambda: pytest.fail("ran a call nobody waits for"))
    assert executor.serve_until(outcome) == "done"
    assert left.cancelled()
    later = executor.submit(lambda: 1)
    executor.shutdown(cancel_futures=True)
    assert later.cancelled()


def test_an_interrupt_in_a_call_reaches_the_serving_thread_and_the_caller_gets_an_error():
    # Ctrl-C while the engine decodes on the trainer's thread must stop that thread, not be
    # handed to the event loop (where it would end the loop and leave the trainer waiting).
    executor = CallerThreadExecutor()

    def interrupted():
        raise KeyboardInterrupt

    call = executor.submit(interrupted)
    left = executor.submit(lambda: 1)
    with pytest.raises(KeyboardInterrupt):
        executor.serve_until(Future())  # an outcome that never comes
    with pytest.raises(RuntimeError, match="interrupted"):
        call.result(timeout=0)
    assert left.cancelled()
