"""The data-preparation actor: the prompt mixer and the verifiers in a Ray actor of their own.

As in open-instruct's design, one actor feeds both sides: it draws prompts and sends them to the
engine actors, scores what comes back in its own reward workers, and hands scored groups to the
trainer, which packs them for the learners. The trainer's process then only packs, logs and
steers; generation, verification and training each run in their own processes.

`DataPrepActor` is the driver's handle with the `EpisodeSource` surface (`produce`,
`mixer_state`, `load_mixer_state`), so the training loop and the async producer use it as they
use a local source. Its failure (a raise, or the actor's death) surfaces as `DataPrepError`
with the actor's traceback (`actor_calls.ActorGroup`, a group of one), and stops the actor.
"""

from __future__ import annotations

from typing import Any

from rlvr.data.mixer import PromptMixer
from rlvr.distributed.actor_calls import ActorGroup
from rlvr.distributed.engine_group import EngineGroup
from rlvr.distributed.ray_session import thread_env
from rlvr.plugins import import_from_environment
from rlvr.producer.source import EpisodeSource, SourceSettings
from rlvr.producer.groups import Episodes
from rlvr.rewards.scorer import RewardScorer, ScorerSettings


class DataPrepError(RuntimeError):
    """The data-preparation actor failed; the run should stop."""


class DataPrepWorker:
    """The actor's body: an `EpisodeSource` over the engine actors, with its own scorer."""

    def __init__(self, mixer: PromptMixer, engine_actors: list, engine_timeout_s: float,
                 settings: SourceSettings, scorer: ScorerSettings):
        import_from_environment()  # the run's plugins: its verifiers and workflow
        self.scorer = RewardScorer.from_settings(scorer)
        engines = EngineGroup.from_actors(engine_actors, engine_timeout_s)
        self.source = EpisodeSource(mixer, engines, self.scorer, settings)

    def ready(self) -> bool:
        return True

    def produce(self, step: int) -> tuple[Episodes, dict[str, float]]:
        return self.source.produce(step)

    def mixer_state(self) -> dict[str, Any]:
        return self.source.mixer_state()

    def load_mixer_state(self, state: dict[str, Any]) -> None:
        self.source.load_mixer_state(state)

    def close(self) -> None:
        self.source.close()  # its episode loop thread
        self.scorer.close()


class DataPrepActor:
    def __init__(self, mixer: PromptMixer, engines: EngineGroup, settings: SourceSettings,
                 scorer: ScorerSettings, timeout_s: float = 600.0):
        import ray

        # No CPU reserved: it waits on engines most of the time, and its reward workers are
        # processes the OS schedules like any other.
        actor = ray.remote(DataPrepWorker).options(
            num_cpus=0, max_concurrency=2, max_restarts=0, runtime_env=thread_env(0),
        ).remote(mixer, engines.actors, engines.timeout_s, settings, scorer)
        self._group = ActorGroup([actor], "data-preparation actor", "data-preparation actor",
                                 DataPrepError)
        self._call("ready", (), "start", timeout_s)

    def produce(self, step: int) -> tuple[Episodes, dict[str, float]]:
        return self._call("produce", (step,), f"producing step {step}")

    def mixer_state(self) -> dict[str, Any]:
        return self._call("mixer_state", (), "reading the mixer state")

    def load_mixer_state(self, state: dict[str, Any]) -> None:
        self._call("load_mixer_state", (state,), "restoring the mixer state")

    def close(self) -> None:
        self._group.close("close", timeout_s=30)

    def _call(self, method: str, args: tuple, what: str,
              timeout_s: float | None = None) -> Any:
        return self._group.call(method, [args], what, timeout_s)[0]
