"""Run a step's episodes concurrently: prompts in, scored groups (`Episodes`) out.

`EpisodeRunner.run(prompts, params, shaping)` starts one episode per prompt on an event loop of
its own (a thread), waits for all, and turns each episode's trajectories into a group of
`Sample`s. Engine calls of all episodes are batched together (`rlvr.rollout.client`), and so are
verifier calls. While it waits, the calling thread (the trainer's, or the producer thread) runs
the engine's batches itself, so that the engine and the learner compute on one thread
(`CallerThreadExecutor` says why that matters).

Failure: an episode that raises, or outlives `episode_timeout_s` of its own time, loses its
group; both are counted (`workflow/errors`, `workflow/timeouts`) and the first error of a step
is logged with its traceback. The time its tool calls waited for a sandbox slot, held by other
episodes' calls, is not its own (`rlvr.workflows.slots`); the longest such wait of the step is
`workflow/sandbox_wait_s_max`. If every episode of a step fails the step raises: a workflow
that never works must stop the run, not train on nothing. A failing engine or scorer
(`BatchCallFailed`) raises at once: that is the run's machinery, not an episode's doing. The
built-in workflows run a group's samples with `gather_samples`, so one sample that raises
stops its siblings with it.

`EpisodePath` is how a run plays its episodes (its workflow and what that reads); training
(`rlvr.producer.source`) and evaluation (`rlvr.producer.evaluation`) both build their runner
from it, so an eval episode is a training episode sampled with eval's settings.
"""

from __future__ import annotations

import asyncio
import logging
import threading
from dataclasses import dataclass, field
from typing import Any, Awaitable, Callable, TypeVar

from rlvr.data.templates import ChatTemplate, load_chat_template
from rlvr.producer.groups import Episodes, RewardShaping
from rlvr.rewards.scorer import RewardScorer, ScoreRequest
from rlvr.rollout.base import EngineUnavailable, RolloutEngine
from rlvr.rollout.client import (BatchCallFailed, CallerThreadExecutor, Coalescer, EngineClient,
                                 EpisodeTracker, current_episode, episode_position)
from rlvr.types import Prompt, RewardOutcome, Sample, SamplingParams
from rlvr.workflows.base import (EpisodeContext, Trajectory, Workflow, WorkflowSettings,
                                 get_workflow)
from rlvr.workflows.chat import continuation_ids
from rlvr.workflows.slots import EpisodeClock, SandboxSlots

log = logging.getLogger(__name__)
T = TypeVar("T")


class EpisodeRunner:
    """Uses, and does not own, the engine and the scorer; `close()` stops its loop thread.
    The text between turns follows `chat_template` (`data.chat_template`; default the
    tokenizer's own), unless a `continuation` is given."""

    def __init__(self, workflow: Workflow, engine: RolloutEngine, scorer: RewardScorer,
                 tokenizer: Any, settings: WorkflowSettings,
                 continuation: Callable[[list[dict], list[dict], int | None], list[int]] | None = None,
                 episode_timeout_s: float = 600.0, max_batch_wait_s: float = 1.0,
                 chat_template: ChatTemplate | None = None, sandbox_slots: int | None = None):
        self.workflow, self.tokenizer, self.settings = workflow, tokenizer, settings
        if continuation is None and tokenizer is not None:  # the run's chat template
            render = chat_template.render if chat_template is not None else None

            def continuation(messages, new_messages, last_token_id):
                return continuation_ids(tokenizer, messages, new_messages, last_token_id,
                                        render)
        self.continuation, self.episode_timeout_s = continuation, episode_timeout_s
        self.tracker = EpisodeTracker()
        self.sandbox = SandboxSlots(sandbox_slots)  # tool calls; default one per usable CPU
        self._on_caller = CallerThreadExecutor()  # the engine decodes on run()'s caller
        self.engine = EngineClient(engine, self.tracker, max_batch_wait_s, self._on_caller)
        self.scorer = Coalescer(lambda _key, batches: _score_batches(scorer, batches),
                                self.tracker, "scorer", max_batch_wait_s)
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, name="rlvr-episodes",
                                        daemon=True)
        self._thread.start()

    def run(self, prompts: list[Prompt], params: SamplingParams,
            shaping: RewardShaping) -> tuple[Episodes, dict[str, float]]:
        """Every prompt's group, in prompt order (failed episodes left out), and the step's
        workflow metrics. One caller at a time: the engine's batches run on its thread."""
        future = asyncio.run_coroutine_threadsafe(self._run_all(prompts, params, shaping),
                                                  self._loop)
        return self._on_caller.serve_until(future)

    def close(self) -> None:
        self.engine.close()
        self.scorer.close()
        self.sandbox.close()
        if self._loop.is_running():
            self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(timeout=10)

    async def _run_all(self, prompts: list[Prompt], params: SamplingParams,
                       shaping: RewardShaping) -> tuple[Episodes, dict[str, float]]:
        clocks = [EpisodeClock(self.episode_timeout_s) for _ in prompts]
        # In prompt order: requests batch in it.
        tasks = [asyncio.ensure_future(self._episode(i, prompt, params, shaping, clock))
                 for i, (prompt, clock) in enumerate(zip(prompts, clocks))]
        results = await asyncio.gather(*tasks, return_exceptions=True)
        groups, outcomes = [], []
        trajectories: list[Trajectory] = []
        errors = timeouts = 0
        first_error: BaseException | None = None
        for prompt, result in zip(prompts, results):
            if isinstance(result, (BatchCallFailed, EngineUnavailable)):
                raise result
            if isinstance(result, asyncio.TimeoutError):
                timeouts += 1
                continue
            if isinstance(result, BaseException):
                errors += 1
                if first_error is None:
                    first_error = result
                    # One line on the console; the traceback at debug level (--log-level
                    # debug): a step's failing episodes fail alike, and a run that stops on
                    # them says why in one line of its own.
                    name = getattr(self.workflow, "__name__", "workflow")
                    log.warning("a %s episode failed (prompt %s): %s: %s; its group is left "
                                "out (--log-level debug shows the traceback)", name, prompt.id,
                                type(result).__name__, str(result)[:500])
                    log.debug("the %s episode of prompt %s failed", name, prompt.id,
                              exc_info=result)
                continue
            groups.append([Sample(prompt=prompt, completion=t.completion, reward=t.reward)
                           for t in result])
            outcomes.append([t.outcome for t in result])
            trajectories += result
        if prompts and not groups:
            raise RuntimeError(f"every episode of the step failed ({errors} raised, {timeouts} "
                               f"timed out after {self.episode_timeout_s} s)") from first_error
        metrics = {"workflow/errors": float(errors), "workflow/timeouts": float(timeouts),
                   "workflow/sandbox_wait_s_max": max((c.waited_s for c in clocks), default=0.0),
                   **_trajectory_metrics(trajectories)}
        return Episodes(groups=groups, outcomes=outcomes), metrics

    async def _episode(self, position: int, prompt: Prompt, params: SamplingParams,
                       shaping: RewardShaping, clock: EpisodeClock) -> list[Trajectory]:
        episode = self.tracker.start()
        current_episode.set(episode)  # this task's context only
        episode_position.set(position)
        # A context per episode: a workflow may adjust its own sampling (tool stop strings).
        ctx = EpisodeContext(self.engine, self.scorer, self.tokenizer, params, shaping,
                             self.settings, self.continuation, self.sandbox, clock)
        try:
            trajectories = await _within(clock, self.workflow(ctx, prompt))
        finally:
            self.tracker.finish(episode)
        if not trajectories or not all(isinstance(t, Trajectory) for t in trajectories):
            raise TypeError(f"a workflow must return a non-empty list of Trajectory, got "
                            f"{type(trajectories).__name__}")
        return trajectories


@dataclass(frozen=True)
class EpisodePath:
    """How a run plays an episode: its workflow (`rollout.workflow`, a registered name or
    'package.module:function'), the settings it reads (`rollout.*`), the time an episode may
    take, and the chat template the text between turns follows (`data.chat_template`). One
    record for training and evaluation: what differs between them is only the sampling (eval's
    n, temperature, seeds) and the reward shaping, which `EpisodeRunner.run` is given."""

    workflow: str = "single_turn"
    settings: WorkflowSettings = field(default_factory=WorkflowSettings)
    episode_timeout_s: float = 600.0
    chat_template: str = "tokenizer"

    def runner(self, engine: RolloutEngine, scorer: RewardScorer,
               tokenizer: Any) -> EpisodeRunner:
        """A runner of this workflow over `engine` and `scorer`; its caller closes it. Without
        a tokenizer only one-turn workflows can run (there is no template for later turns)."""
        template = (load_chat_template(self.chat_template, tokenizer)
                    if tokenizer is not None else None)
        return EpisodeRunner(get_workflow(self.workflow), engine, scorer, tokenizer,
                             self.settings, episode_timeout_s=self.episode_timeout_s,
                             chat_template=template)


async def _within(clock: EpisodeClock, work: Awaitable[T]) -> T:
    """`work`'s result, or asyncio.TimeoutError (`work` cancelled) once `clock` runs out."""
    task = asyncio.ensure_future(work)
    try:
        while not task.done():
            left = clock.left_s()  # does not shrink while the episode waits for a slot
            if left <= 0:
                raise asyncio.TimeoutError
            await asyncio.wait({task}, timeout=left)
        return task.result()
    finally:
        if not task.done():
            task.cancel()
            await asyncio.gather(task, return_exceptions=True)


def _score_batches(scorer: RewardScorer, batches: list[list[ScoreRequest]]
                   ) -> list[list[RewardOutcome]]:
    """Many episodes' score requests in one scorer call (its workers stay busy)."""
    flat = scorer.score([r for batch in batches for r in batch])
    out, i = [], 0
    for batch in batches:
        out.append(flat[i:i + len(batch)])
        i += len(batch)
    return out


def _trajectory_metrics(trajectories: list[Trajectory]) -> dict[str, float]:
    """A workflow's per-trajectory counts over the step: summed, or averaged for `*_mean`."""
    sums: dict[str, float] = {}
    for t in trajectories:
        for key, value in t.metrics.items():
            sums[key] = sums.get(key, 0.0) + float(value)
    n = max(len(trajectories), 1)
    return {k: v / n if k.endswith("_mean") else v for k, v in sums.items()}
