"""The rollout engine protocol: token ids in, sampled token ids and their logprobs out.

An engine knows nothing about rewards, chat templates or training; it samples continuations and
accepts new weights. Each engine lives in a subpackage of its own (`rlvr.rollout.<engine>`)
and registers an `Engine` record by name, so
`rollout.engine` picks one and the rest of the house asks the record what the engine can do
(docs/engines.md: what a new engine implements). This module names no engine.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from dataclasses import dataclass
from dataclasses import field as dataclass_field
from pathlib import Path
from typing import Any, Callable, Iterable, Protocol, runtime_checkable

import torch

from rlvr.run.errors import EngineUnavailable  # noqa: F401  (engines raise it from here
from rlvr.registry import Registry
from rlvr.types import Completion, SamplingParams

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class EngineSettings:
    """What an engine needs to start, and nothing the trainer alone reads (prompt counts,
    async steps, sampling temperature): `rlvr.run.settings.engine_settings` makes it from the rollout
    config section, and engine actors receive only this. Field names follow `rollout.*`."""

    dtype: str = "float32"  # the engine's own copy of the weights: float32 | bfloat16
    max_batch_rows: int = 256  # sequences decoded together (transformers engine)
    transformers_decode: str = "auto"  # auto | static | dynamic (transformers engine)
    cuda_graphs: bool = True  # static decoding's step as a CUDA graph (transformers engine)
    inflight_updates: bool = False  # new weights may load between tokens of a generation
    tensor_parallel_size: int = 1  # devices one engine spans
    # Each engine's own options section of the rollout config (rollout.<engine>), by engine
    # name; an engine reads its own and no other part reads any.
    engine_options: Mapping[str, Any] = dataclass_field(default_factory=dict)
    colocate: bool = False  # the engine sleeps while a learner on its device trains
    weight_sync_bucket_mb: int = 512
    # Remote engine (rollout.engine=remote): inference servers over HTTP.
    server_addresses: tuple[str, ...] = ()
    server_max_retries: int = 2
    server_request_timeout_s: float = 600.0
    weight_update: str = "disk"  # disk | broadcast
    weight_sync_host: str = ""  # this host's address as servers reach it (broadcast)
    # Not rollout fields; set by `rlvr.run.settings.engine_settings`. `device`: "cuda" | "cpu" as the
    # driver resolved `model.device` ("auto": the engine's process decides from what it
    # sees). `weight_update_dir`: where disk updates are written (<output_dir>/weight_updates).
    # `server_key_file`: the run's server key (<output_dir>/server.key), if the environment
    # names none (rlvr.serving.auth).
    device: str = "auto"
    weight_update_dir: str = ""
    server_key_file: str = ""
    weight_update_timeout_s: float = 600.0


class RolloutEngine(Protocol):
    def generate(self, prompts: list[list[int]], params: SamplingParams) -> list[list[Completion]]:
        """For each prompt, `params.n` completions (in prompt order)."""
        ...

    def update_weights(self, named_tensors: Iterable[tuple[str, torch.Tensor]],
                       version: int) -> None:
        """Load new weights in place; completions produced afterwards carry `version`."""
        ...

    def close(self) -> None: ...


@runtime_checkable
class AsyncRolloutEngine(RolloutEngine, Protocol):
    """An engine that schedules concurrent requests itself (a serving engine's async front,
    remote servers): many episodes await `agenerate` at once and share its continuous batching.
    Engines without it are driven through `rlvr.rollout.client.EngineClient`, which batches
    pending requests into `generate` calls."""

    async def agenerate(self, prompt_ids: list[int], params: SamplingParams) -> list[Completion]:
        """`params.n` completions of one prompt; each carries the version of its tokens."""
        ...


class SleepingEngine(RolloutEngine, Protocol):
    """An engine that can give its device memory back while a learner on the same device
    trains (`rollout.colocate`): `sleep` releases its KV cache and offloads its weights,
    `wake_up` restores them. Weights must not be updated while it sleeps."""

    def sleep(self) -> None: ...

    def wake_up(self) -> None: ...


# Factory signature: (model_dir, engine settings, eos/stop token ids, pad id) -> engine.
EngineFactory = Callable[[str, EngineSettings, tuple[int, ...], int], RolloutEngine]


def _usable() -> str | None:
    return None


def _no_version() -> str | None:
    return None


def _one_rank(settings: EngineSettings) -> int:
    return 1


@dataclass(frozen=True)
class Engine:
    """What rlvr knows about one engine, registered under its name (`register_engine`): how to
    build it and every question the rest of the house would otherwise answer with
    `if engine == "<name>"`. Code outside the engine's subpackage asks the record
    (`engine_record(name).can_sleep`), never the name.

    - `factory`: builds the engine (`EngineFactory`).
    - `available`: None where it can run here, else the reason it cannot (a missing package,
      with its install command); `rollout.engine=auto` asks it, and a named engine that is
      unavailable fails at start with this reason.
    - `auto_preference`: `auto` takes the available engine with the lowest number; None: never
      chosen by `auto` (remote servers, test engines) and only ever named.
    - `beside_local_ranks`: can start in learner rank 0's process while the local launcher's
      other ranks hold that process's default group (False: it would wait on that group).
    - `tensor_parallel`: one engine may span several devices (`rollout.tensor_parallel_size`).
    - `can_sleep`: a `SleepingEngine`, so `rollout.colocate` can share a GPU with the learner.
    - `uses_servers`: generates on inference servers that a launcher may start for it.
    - `receiving_ranks`: ranks one engine takes in a weight broadcast (each tensor-parallel
      worker receiving for itself, or the engine's one process).
    - `checks`: its own config checks, `(Config) -> [error, ...]`, for settings only it reads.
    - `version`: the installed version of the library it drives, for `rlvr env` (None: none).
    """

    name: str
    factory: EngineFactory
    available: Callable[[], str | None] = _usable
    auto_preference: int | None = None
    beside_local_ranks: bool = True
    tensor_parallel: bool = False
    can_sleep: bool = False
    uses_servers: bool = False
    receiving_ranks: Callable[[EngineSettings], int] = _one_rank
    checks: Callable[[Any], list[str]] | None = None
    version: Callable[[], str | None] = _no_version


ENGINES: Registry[Engine] = Registry("rollout.engine")


def register_engine(name: str, **facts: Any) -> Callable[[EngineFactory], EngineFactory]:
    """Decorator on an engine factory: registers `Engine(name, factory, **facts)` and returns
    the factory unchanged. `@register_engine("mine")` alone gives an engine with the defaults
    (always available, never chosen by `auto`, one process, no sleep, no servers)."""
    def wrap(factory: EngineFactory) -> EngineFactory:
        ENGINES.add(name, Engine(name, factory, **facts), defined_by=factory)
        return factory

    return wrap


AUTO = "auto"  # `rollout.engine=auto`: the preferred engine that can run here


def engine_record(name: str) -> Engine:
    """The record of a registered engine (not `auto`: resolve it first)."""
    return ENGINES.lookup(name)


def resolve_engine_name(name: str,
                        suits: Callable[[Engine], str | None] = lambda engine: None) -> str:
    """The engine `rollout.engine` means: `auto` is the available engine with the lowest
    `auto_preference` that also `suits` this run (a reason it does not, else None), every one
    passed over logged with its reason; other names as given."""
    if name != AUTO:
        return name
    candidates = sorted((e for e in ENGINES.values() if e.auto_preference is not None),
                        key=lambda e: e.auto_preference)
    passed_over = []
    for engine in candidates:
        reason = engine.available() or suits(engine)
        if reason is None:
            if passed_over:
                log.warning("rollout.engine=auto: the %s engine generates (%s)", engine.name,
                            "; ".join(passed_over))
            return engine.name
        passed_over.append(f"not {engine.name}: {reason}")
    raise RuntimeError("rollout.engine=auto: no registered engine can run here ("
                            + "; ".join(passed_over) + ")")


def create_engine(name: str, model_dir: str | Path, cfg: EngineSettings,
                  eos_token_ids: tuple[int, ...], pad_token_id: int) -> RolloutEngine:
    engine = engine_record(resolve_engine_name(name))
    reason = engine.available()
    if reason is not None:
        # Not EngineUnavailable (an engine lost mid-run): nothing started, the setup is wrong.
        raise RuntimeError(f"rollout.engine={engine.name}: {reason}")
    return engine.factory(str(model_dir), cfg, eos_token_ids, pad_token_id)
