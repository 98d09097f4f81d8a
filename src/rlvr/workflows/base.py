"""The rollout workflow: `async def run_episode(ctx, prompt) -> list[Trajectory]`.

A workflow turns one prompt into its group of finished trajectories, calling the engine as often
as it likes through `ctx` (one turn, retries with feedback, tool calls). Many episodes run at
once on one event loop (`rlvr.workflows.runner`); their engine calls are batched together
(`rlvr.rollout.client`). What comes back is token sequences with a loss mask, so groups,
advantages, filtering, packing and the learner treat an episode of any number of turns like a
one-turn sample.

Workflows are registered by name (`rollout.workflow`); a name `package.module:function` is
imported on first use, so a user's workflow needs no registration.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field, replace
from typing import Any, Awaitable, Callable, Iterable, Protocol, Sequence, TypeVar

from rlvr.producer.groups import RewardShaping, shape_rewards
from rlvr.registry import Registry
from rlvr.rewards.scorer import ScoreRequest
from rlvr.rollout.client import Coalescer, EngineClient
from rlvr.rollout.seeds import derive_seed
from rlvr.types import Completion, Prompt, RewardOutcome, SamplingParams
from rlvr.workflows.slots import EpisodeClock, SandboxSlots


@dataclass
class Trajectory:
    """One finished episode of a group: every token after the prompt (`completion`, with its
    loss mask when not all are the model's), the reward the advantage is computed from, the
    verifier outcome behind it, and the workflow's own counts (summed over the step; a key
    ending in `_mean` is averaged instead)."""

    completion: Completion
    reward: float
    outcome: RewardOutcome
    metrics: dict[str, float] = field(default_factory=dict)


@dataclass(frozen=True)
class WorkflowSettings:
    """The `rollout.*` settings built-in workflows read; `args` holds `rollout.workflow_args`
    for a user's workflow."""

    max_turns: int = 1
    turn_discount: float = 1.0  # a multi-turn answer right at turn t earns discount**t
    feedback: str = "Your answer is incorrect. Think again and give a corrected final answer."
    max_tool_calls: int = 4
    tool_timeout_s: float = 5.0
    tool_output_chars: int = 1000  # tool output past this is cut before the model sees it
    max_episode_tokens: int = 0  # tokens after the prompt, all turns; 0: one turn's worth
    args: dict[str, Any] = field(default_factory=dict)


class EpisodeContext:
    """What an episode may use. Built per step by the runner; shared by the step's episodes."""

    def __init__(self, engine: EngineClient, scorer: Coalescer, tokenizer: Any,
                 params: SamplingParams, shaping: RewardShaping, settings: WorkflowSettings,
                 continuation: Callable[[list[dict], list[dict], int | None], list[int]] | None = None,
                 sandbox: SandboxSlots | None = None, clock: EpisodeClock | None = None):
        self.engine, self.tokenizer, self.params = engine, tokenizer, params
        self.shaping, self.settings = shaping, settings
        self._scorer = scorer
        self._continuation = continuation
        self._sandbox, self._clock = sandbox, clock

    async def sandboxed(self, fn: Callable[..., T], *args, **kwargs) -> T:
        """`fn(*args, **kwargs)`, a blocking sandbox run (a tool call), on one of the run's
        sandbox slots, at most one per CPU (`rlvr.workflows.slots`). The time it waits for a
        slot is not charged to the episode's timeout."""
        if self._sandbox is None:  # a context built without the runner's slots
            return await asyncio.to_thread(fn, *args, **kwargs)
        return await self._sandbox.run(self._clock, fn, *args, **kwargs)

    async def generate(self, prompt_ids: Sequence[int], params: SamplingParams | None = None,
                       sample: int | None = None) -> list[Completion]:
        """`params.n` completions of `prompt_ids` (default: the step's sampling, a group).
        A request that continues one sample of the group names its index, `sample`: the
        sample's seed is derived from it, so the group's samples do not share a random stream
        at later turns (`rlvr.rollout.client.EngineClient`)."""
        return await self.engine.generate(prompt_ids, params or self.params, sample)

    def turn_params(self, turn: int, max_tokens: int | None = None) -> SamplingParams:
        """One sample for turn `turn` > 0 of an episode: its own seed (the step's would redraw
        the first turn's randomness), at most `max_tokens`. The seed is the turn's; pass the
        sample's index to `generate` so that each sample of the group draws its own."""
        p = self.params
        return replace(p, n=1, seed=None if p.seed is None else derive_seed(p.seed, turn=turn),
                       max_tokens=p.max_tokens if max_tokens is None else max_tokens)

    async def score(self, prompt: Prompt, texts: Sequence[str],
                    trajectories: Sequence[Sequence[dict]] | None = None
                    ) -> list[RewardOutcome]:
        """Each text scored by the verifiers `prompt` names (bounded in time, never raises for
        a verifier's failure: `RewardOutcome.error`). `trajectories[k]`, the messages of text
        k's episode after the prompt (its last turn included), reaches verifiers that declare
        `trajectory`; without it they see the text as the one assistant message."""
        if trajectories is not None and len(trajectories) != len(texts):
            raise ValueError(f"{len(trajectories)} trajectories for {len(texts)} texts")
        requests = [ScoreRequest.for_prompt(prompt, k, text,
                                            None if trajectories is None else trajectories[k])
                    for k, text in enumerate(texts)]
        return await self._scorer.submit(None, requests)

    def shape(self, scores: Sequence[float], completions: Sequence[Completion],
              turn_lengths: Sequence[Sequence[int]] | None = None) -> list[float]:
        """The run's reward shaping (format reward, non-stop and overlong penalties). For a
        multi-turn episode pass its last turn as the completion and the lengths of all its
        model turns (`TrajectoryBuilder.turn_lengths`): the overlong penalty takes the worst
        turn's."""
        return shape_rewards(list(scores), list(completions), self.shaping,
                             None if turn_lengths is None else [list(t) for t in turn_lengths])

    def continuation_ids(self, messages: list[dict], new_messages: list[dict],
                         last_turn: Completion) -> list[int]:
        """Token ids that follow a finished assistant turn (`last_turn`, the last of
        `messages`) to add `new_messages` and open the next assistant turn, in the run's chat
        template (`rlvr.workflows.chat`)."""
        if self._continuation is None:
            raise RuntimeError("this run has no chat template for multi-turn episodes")
        last = last_turn.token_ids_T[-1] if last_turn.token_ids_T else None
        return self._continuation(messages, new_messages, last)


Workflow = Callable[[EpisodeContext, Prompt], Awaitable[list[Trajectory]]]
T = TypeVar("T")


async def gather_samples(conversations: Iterable[Awaitable[T]]) -> list[T]:
    """The results of a group's per-sample conversations, run concurrently, in order.

    If one raises, the others are cancelled (and awaited) before the error goes on, failing the
    episode: the runner counts it and leaves the group out. `asyncio.gather` alone would leave
    them running after their episode ended; their engine calls would then be decoded in a
    later step, inside its batches. A sample is not given a score of 0 instead: an exception
    is the workflow's (or the template's, or the host's) failure, not the model's doing, and a
    made-up reward would be trained on and would shift its siblings' advantages."""
    tasks = [asyncio.ensure_future(c) for c in conversations]  # in order: requests batch so
    try:
        return list(await asyncio.gather(*tasks))
    except BaseException:  # also when the episode itself is cancelled (its timeout)
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        raise


class WorkflowFactory(Protocol):
    def __call__(self, settings: WorkflowSettings) -> Workflow: ...


def _plain_workflow(fn: object) -> Workflow:
    """`WORKFLOWS.adapt`: an async function nobody registered, named 'package.module:function'."""
    if not asyncio.iscoroutinefunction(fn):
        raise TypeError(f"{getattr(fn, '__qualname__', fn)!r} is not an async function "
                        "(ctx, prompt) -> list[Trajectory]")
    return fn


WORKFLOWS: Registry[Workflow] = Registry("rollout.workflow", adapt=_plain_workflow)
register_workflow = WORKFLOWS.register


def get_workflow(name: str) -> Workflow:
    """The workflow called `name`, or the one a `package.module:function` name points at (the
    module's registered workflow, or a plain async function: `rlvr.registry`)."""
    if name not in WORKFLOWS and ":" not in name:
        raise KeyError(f"unknown workflow '{name}'; known: {', '.join(WORKFLOWS.names())} "
                       "(or name one as 'package.module:function')")
    try:
        return WORKFLOWS.lookup(name)
    except ValueError as e:
        raise KeyError(str(e)) from e


def is_known_workflow(name: str) -> bool:
    """True for a registered name; a 'module:function' name is imported when the run builds."""
    return name in WORKFLOWS or ":" in name


class TrajectoryBuilder:
    """Concatenates turns into one `Completion`: the model's tokens (loss mask 1, their
    logprobs and versions) and tokens it was given (mask 0, logprob 0)."""

    def __init__(self) -> None:
        self.token_ids: list[int] = []
        self.logprobs: list[float] = []
        self.loss_mask: list[int] = []
        self.versions: list[int] = []
        self.last: Completion | None = None  # the latest model turn
        self.turn_lengths: list[int] = []  # tokens of each model turn, in order

    @property
    def model_turns(self) -> int:
        return len(self.turn_lengths)

    def add_model(self, c: Completion) -> None:
        self.token_ids += c.token_ids_T
        self.logprobs += c.logprobs_T
        self.loss_mask += [1] * len(c.token_ids_T)
        self.versions += c.versions_T or [c.model_version] * len(c.token_ids_T)
        self.last = c
        self.turn_lengths.append(len(c.token_ids_T))

    def add_given(self, ids: Sequence[int]) -> None:
        version = self.versions[-1] if self.versions else 0
        self.token_ids += list(ids)
        self.logprobs += [0.0] * len(ids)
        self.loss_mask += [0] * len(ids)
        self.versions += [version] * len(ids)

    def build(self, tokenizer: Any) -> Completion:
        """A one-turn episode gives back the engine's completion untouched."""
        if self.last is None:
            raise ValueError("a trajectory needs at least one model turn")
        if self.model_turns == 1 and len(self.token_ids) == len(self.last.token_ids_T):
            return self.last
        model_versions = [v for v, m in zip(self.versions, self.loss_mask) if m]
        return Completion(
            token_ids_T=list(self.token_ids), logprobs_T=list(self.logprobs),
            finish_reason=self.last.finish_reason,
            text=tokenizer.decode(self.token_ids, skip_special_tokens=True),
            model_version=min(model_versions), loss_mask_T=list(self.loss_mask),
            versions_T=list(self.versions))
