"""Tool calls share the CPU fairly: at most one sandbox per slot, an honest call beside spinning
ones keeps its time, and an episode is not charged for waiting on other episodes' calls."""

import asyncio
import threading
import time

from rlvr.producer.groups import RewardShaping
from rlvr.rewards.sandbox import SandboxRun
from rlvr.rewards.scorer import RewardScorer
from rlvr.types import SamplingParams
from rlvr.workflows import EpisodeRunner, WorkflowSettings
from rlvr.workflows import tools as tools_module
from rlvr.workflows.slots import EpisodeClock
from rlvr.workflows.tool_use import tool_use

from tests.workflows.conftest import ConversationEngine

SPIN = "while True:\n    pass"
# Honest work measured in CPU time, so it asks the same of any machine: 1.1 s of CPU, under a
# 3 s limit. Beside five spinning calls on the default pool (six at once on 2 cores) it gets a
# third of a core: 3.3 s. On a slot of its own beside one spinning call and a busy pytest
# worker, two thirds of a core: 1.65 s (1.8x margin; 1.4x with a fourth busy process).
HONEST = ("import time\nwhile time.process_time() < 1.1:\n    pass\nprint('done')")
HONEST_LIMIT_S = 3.0


def _fence(code):
    return f"```python\n{code}\n```"


def _run(tokenizer, prompts, reply, timeout_s=600.0, tool_timeout_s=2.5, **runner_kwargs):
    engine = ConversationEngine(tokenizer, reply)
    with RewardScorer(num_workers=0) as scorer:
        runner = EpisodeRunner(tool_use, engine, scorer, tokenizer,
                               WorkflowSettings(max_turns=2, tool_timeout_s=tool_timeout_s),
                               episode_timeout_s=timeout_s, max_batch_wait_s=0.05,
                               **runner_kwargs)
        try:
            return engine, *runner.run(prompts, SamplingParams(n=1, max_tokens=200),
                                       RewardShaping())
        finally:
            runner.close()


def _calls_by_question(code_of):
    def reply(conversation, turn, k):
        if turn > 0:
            return "The answer is 42."
        return _fence(code_of(conversation))
    return reply


def test_at_most_one_tool_call_per_slot_runs_at_once(tiny_tokenizer, chat_prompt, monkeypatch):
    """The loop's default pool ran min(32, cores + 4) sandboxes at once: 6 on 2 cores."""
    running, peak, lock = [0], [0], threading.Lock()

    def fake_run_tests(code, tests, timeout_s):
        with lock:
            running[0] += 1
            peak[0] = max(peak[0], running[0])
        time.sleep(0.2)
        with lock:
            running[0] -= 1
        return SandboxRun((True,), False, 0, "42\n")

    with monkeypatch.context() as m:
        m.setattr(tools_module, "run_tests", fake_run_tests)
        prompts = [chat_prompt(f"Q{i}: 6 * 7?", i=i) for i in range(12)]
        _, episodes, metrics = _run(tiny_tokenizer, prompts, _calls_by_question(lambda c: "1"),
                                    sandbox_slots=2)
    assert len(episodes.groups) == 12 and metrics["tools/calls"] == 12
    assert peak[0] == 2


def test_an_honest_call_beside_spinning_ones_keeps_its_time(tiny_tokenizer, chat_prompt):
    """Measured on 2 cores with the default pool: 1.2 s of CPU beside five `while True`
    calls got a third of a core and ran past a 2.5 s limit. With a slot per core it has one
    (margins at `HONEST`)."""
    prompts = [chat_prompt("Q-honest: 6 * 7?", i=0)] + [
        chat_prompt(f"Q-spin{i}: 6 * 7?", i=i) for i in range(1, 6)]
    engine, episodes, metrics = _run(
        tiny_tokenizer, prompts,
        _calls_by_question(lambda c: HONEST if "Q-honest" in c else SPIN),
        tool_timeout_s=HONEST_LIMIT_S)
    assert metrics["tools/calls"] == 6 and metrics["workflow/timeouts"] == 0
    assert metrics["tools/timeouts"] == 5  # the spinning calls, and only those
    honest = [tiny_tokenizer.decode(ids) for ids, _ in engine.requests
              if "Q-honest" in tiny_tokenizer.decode(ids)]
    assert "done" in honest[-1] and "did not finish" not in honest[-1]


def test_waiting_for_other_episodes_calls_is_not_charged_to_the_episode(
        tiny_tokenizer, chat_prompt, monkeypatch):
    """60 calls of 0.2 s on 2 slots queue for 6 s; every episode's own time is well under its
    1 s limit. Charged for the queue (the old `wait_for`), most groups were dropped as timed
    out, the honest one (last in the queue) among them."""
    def fake_run_tests(code, tests, timeout_s):
        time.sleep(0.2 if "slow" in code else 0.0)
        return SandboxRun((True,), False, 0, "42\n")

    with monkeypatch.context() as m:
        m.setattr(tools_module, "run_tests", fake_run_tests)
        prompts = [chat_prompt(f"Q-slow{i}: 6 * 7?", i=i) for i in range(60)]
        prompts.append(chat_prompt("Q-honest: 6 * 7?", i=60))
        _, episodes, metrics = _run(
            tiny_tokenizer, prompts,
            _calls_by_question(lambda c: "print(42)" if "Q-honest" in c else "slow = 1"),
            timeout_s=1.0, sandbox_slots=2)
    assert metrics["workflow/timeouts"] == 0 and len(episodes.groups) == 61
    assert metrics["workflow/sandbox_wait_s_max"] > 2.0  # the queue is visible


def test_an_episode_stuck_in_its_own_call_still_times_out(tiny_tokenizer, chat_prompt,
                                                          monkeypatch):
    """The time a call runs is the episode's own: the limit still ends it."""
    def stuck_run_tests(code, tests, timeout_s):
        time.sleep(3.0)
        return SandboxRun((True,), False, 0, "")

    with monkeypatch.context() as m:
        m.setattr(tools_module, "run_tests", stuck_run_tests)
        prompts = [chat_prompt("Q-stuck: 6 * 7?", i=0), chat_prompt("Q-plain: 6 * 7?", i=1)]

        def reply(conversation, turn, k):
            return _fence("x = 1") if "Q-stuck" in conversation else "The answer is 42."
        start = time.monotonic()
        _, episodes, metrics = _run(tiny_tokenizer, prompts, reply, timeout_s=0.5,
                                    sandbox_slots=1)
    assert time.monotonic() - start < 2.5
    assert metrics["workflow/timeouts"] == 1 and [g[0].prompt.id for g in episodes.groups] == [
        "q/1"]


def test_overlapping_waits_of_an_episode_count_once():
    async def main():
        start = time.monotonic()
        clock = EpisodeClock(10.0)
        with clock.waiting():
            with clock.waiting():
                await asyncio.sleep(0.2)
            await asyncio.sleep(0.1)
        waited_by_then = time.monotonic() - start
        await asyncio.sleep(0.2)  # not waiting: the episode's own time
        return waited_by_then, clock.waited_s, clock.left_s(), time.monotonic() - start

    waited_by_then, waited, left, elapsed = asyncio.run(main())
    assert 0.3 <= waited <= waited_by_then  # not 0.5: two waits at once are one
    assert abs(left - (10.0 - (elapsed - waited))) < 0.05
