"""The data-preparation actor: the prompt mixer and the verifiers in a Ray actor of their own.

As in open-instruct's design, one actor feeds both sides: it draws prompts and sends them to the
engine actors, scores what comes back in its own reward workers, and hands scored groups to the
trainer, which packs them for the learners. The trainer's process then only packs, logs and
steers; generation, verification and training each run in their own processes.

`DataPrepActor` is the driver's handle with the `EpisodeSource` surface (`produce`,
`mixer_state`, `load_mixer_state`), so the training loop and the async producer use it as they
use a local source. Its failure (a raise, or the actor's death) surfaces as `DataPrepError`
with the actor's traceback.
"""

from __future__ import annotations

from typing import Any

from rlvr.data.mixer import PromptMixer
from rlvr.distributed.engine_group import EngineGroup
from rlvr.episode_source import EpisodeSource, SourceSettings
from rlvr.episodes import Episodes
from rlvr.rewards.scorer import RewardScorer


class DataPrepError(RuntimeError):
    """The data-preparation actor failed; the run should stop."""


class DataPrepWorker:
    """The actor's body: an `EpisodeSource` over the engine actors, with its own scorer."""

    def __init__(self, mixer: PromptMixer, engine_actors: list, engine_timeout_s: float,
                 settings: SourceSettings, scorer_args: dict[str, Any]):
        self.scorer = RewardScorer(**scorer_args)
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
        self.scorer.close()


class DataPrepActor:
    def __init__(self, mixer: PromptMixer, engines: EngineGroup, settings: SourceSettings,
                 scorer_args: dict[str, Any], timeout_s: float = 600.0):
        import ray

        # No CPU reserved: it waits on engines most of the time, and its reward workers are
        # processes the OS schedules like any other.
        self._actor = ray.remote(DataPrepWorker).options(
            num_cpus=0, max_concurrency=2, max_restarts=0,
        ).remote(mixer, engines.actors, engines.timeout_s, settings, scorer_args)
        self._call("ready", (), "start", timeout_s)

    def produce(self, step: int) -> tuple[Episodes, dict[str, float]]:
        return self._call("produce", (step,), f"producing step {step}")

    def mixer_state(self) -> dict[str, Any]:
        return self._call("mixer_state", (), "reading the mixer state")

    def load_mixer_state(self, state: dict[str, Any]) -> None:
        self._call("load_mixer_state", (state,), "restoring the mixer state")

    def close(self) -> None:
        import ray

        if self._actor is None:
            return
        try:
            ray.get(self._actor.close.remote(), timeout=30)
        except Exception:  # noqa: BLE001  stopping anyway; the run's own error matters more
            pass
        ray.kill(self._actor, no_restart=True)
        self._actor = None

    def _call(self, method: str, args: tuple, what: str,
              timeout_s: float | None = None) -> Any:
        import ray

        if self._actor is None:
            raise DataPrepError(f"the data-preparation actor is closed ({what})")
        try:
            return ray.get(getattr(self._actor, method).remote(*args), timeout=timeout_s)
        except Exception as e:  # noqa: BLE001  RayTaskError carries the actor's traceback
            actor, self._actor = self._actor, None
            ray.kill(actor, no_restart=True)
            raise DataPrepError(f"the data-preparation actor failed {what}: "
                                f"{type(e).__name__}: {e}") from None
