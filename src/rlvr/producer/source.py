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
from dataclasses import dataclass, field, replace
from typing import Any

from rlvr.data.mixer import PromptMixer
from rlvr.run.faults import verification_failure
from rlvr.models import load_tokenizer
from rlvr.producer.groups import Episodes, RewardShaping, episode_metrics
from rlvr.rewards.scorer import RewardScorer
from rlvr.rollout.base import RolloutEngine
from rlvr.rollout.seeds import derive_seed
from rlvr.producer.prompt_selection import ActiveSampling, collect_episodes, solved_prompt_ids
from rlvr.types import Prompt, SamplingParams
from rlvr.workflows.runner import EpisodePath


@dataclass(frozen=True)
class SourceSettings:
    prompts_per_step: int
    sampling: SamplingParams  # its seed is the run's; each step derives its own from it
    shaping: RewardShaping
    active: ActiveSampling
    retire_pass_rate: float | None = None  # retire prompts solved this often (None: never)
    tokenizer_dir: str = ""  # where a process without the tokenizer (an actor) loads it
    # How an episode is played (the workflow, its settings, timeout and chat template):
    # evaluation plays the same (`rlvr.run.settings.episode_path`).
    episodes: EpisodePath = field(default_factory=EpisodePath)

    def params_for(self, step: int) -> SamplingParams:
        # A seed per step makes a run reproducible and a resumed run continue the same stream.
        seed = self.sampling.seed
        return replace(self.sampling, seed=None if seed is None else derive_seed(seed, step=step))


class EpisodeSource:
    """Uses, and does not own, the engine and the scorer: whoever built them closes them."""

    def __init__(self, mixer: PromptMixer, engine: RolloutEngine, scorer: RewardScorer,
                 settings: SourceSettings, tokenizer: Any = None):
        self.mixer, self.engine, self.scorer, self.settings = mixer, engine, scorer, settings
        self._lock = threading.Lock()  # the trainer reads the mixer's state for checkpoints
        if tokenizer is None and settings.tokenizer_dir:  # in an actor: load its own
            tokenizer = load_tokenizer(settings.tokenizer_dir)
        self.runner = settings.episodes.runner(engine, scorer, tokenizer)

    def produce(self, step: int) -> tuple[Episodes, dict[str, float]]:
        """Generate and score step `step`'s groups (the engine's current weights)."""
        s = self.settings
        start = time.perf_counter()
        episodes, sampled, metrics = collect_episodes(
            self._run_groups, self._next_prompts, s.prompts_per_step, s.params_for(step),
            s.active)
        # What the policy scored on everything it sampled, not on the groups kept for training
        # (active sampling keeps only groups with reward spread: no solved prompt among them).
        metrics = {**episode_metrics(sampled), **metrics, **self.scorer.metrics_since_last()}
        episodes = replace(episodes, sampled_failure=verification_failure(
            sampled, getattr(self.scorer, "timeout_s", 0.0)))
        if s.retire_pass_rate is not None:
            with self._lock:
                self.mixer.retire(solved_prompt_ids(sampled, s.retire_pass_rate,
                                                     s.shaping.max_reward))
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
        """Stops the episode loop; the engine and the scorer are their builder's to close."""
        self.runner.close()

    def _run_groups(self, prompts: list[Prompt], params: SamplingParams
                    ) -> tuple[Episodes, dict[str, float]]:
        return self.runner.run(prompts, params, self.settings.shaping)

    def _next_prompts(self, n: int) -> list[Prompt]:
        with self._lock:
            return self.mixer.next_batch(n)
