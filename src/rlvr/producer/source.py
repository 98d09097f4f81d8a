"""A step's scored groups, from the prompt mixer through the engine and the verifiers.

`EpisodeSource.produce(step)` is the part of a training step that may run ahead of training
(`async_rollouts`) and may run in a process of its own (`rlvr.distributed.data_prep`, the
data-preparation actor): it draws prompts, generates a group per prompt, scores them, and
retires prompts the policy already solves. It owns the mixer, so the mixer's position (saved
in the training state) is read and restored through it, under the same lock as the draws.

Not here: advantages, filtering and packing (`batching`), the learner, evaluation.
"""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass, replace
from typing import Any

from rlvr.data.mixer import PromptMixer
from rlvr.producer.groups import Episodes, RewardShaping, episode_metrics
from rlvr.rewards.scorer import RewardScorer
from rlvr.rollout.base import RolloutEngine
from rlvr.rollout.seeds import derive_seed
from rlvr.producer.prompt_selection import ActiveSampling, collect_episodes, solved_prompt_ids
from rlvr.types import Prompt, SamplingParams


@dataclass(frozen=True)
class SourceSettings:
    prompts_per_step: int
    sampling: SamplingParams  # its seed is the run's; each step derives its own from it
    shaping: RewardShaping
    active: ActiveSampling
    retire_pass_rate: float | None = None  # retire prompts solved this often (None: never)

    def params_for(self, step: int) -> SamplingParams:
        # A seed per step makes a run reproducible and a resumed run continue the same stream.
        seed = self.sampling.seed
        return replace(self.sampling, seed=None if seed is None else derive_seed(seed, step=step))


class EpisodeSource:
    """Uses, and does not own, the engine and the scorer: whoever built them closes them."""

    def __init__(self, mixer: PromptMixer, engine: RolloutEngine, scorer: RewardScorer,
                 settings: SourceSettings):
        self.mixer, self.engine, self.scorer, self.settings = mixer, engine, scorer, settings
        self._lock = threading.Lock()  # the trainer reads the mixer's state for checkpoints

    def produce(self, step: int) -> tuple[Episodes, dict[str, float]]:
        """Generate and score step `step`'s groups (the engine's current weights)."""
        s = self.settings
        start = time.perf_counter()
        episodes, metrics = collect_episodes(self.engine, self.scorer, self._next_prompts,
                                             s.prompts_per_step, s.params_for(step), s.shaping,
                                             s.active)
        metrics = {**episode_metrics(episodes), **metrics, **self.scorer.metrics_since_last()}
        if s.retire_pass_rate is not None:
            with self._lock:
                self.mixer.retire(solved_prompt_ids(episodes, s.retire_pass_rate))
                metrics["batch/retired_prompts"] = float(len(self.mixer.retired))
        metrics["time/generation"] = time.perf_counter() - start
        return episodes, metrics

    def mixer_state(self) -> dict[str, Any]:
        with self._lock:
            return self.mixer.state_dict()

    def load_mixer_state(self, state: dict[str, Any]) -> None:
        with self._lock:
            self.mixer.load_state_dict(state)

    def close(self) -> None:
        """Nothing of its own to release (the engine and the scorer are their builder's); the
        data-preparation actor behind the same surface has a process to stop."""

    def _next_prompts(self, n: int) -> list[Prompt]:
        with self._lock:
            return self.mixer.next_batch(n)
