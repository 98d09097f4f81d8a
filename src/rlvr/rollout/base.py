"""The rollout engine protocol: token ids in, sampled token ids and their logprobs out.

An engine knows nothing about rewards, chat templates or training; it samples continuations and
accepts new weights. Engines register a factory by name so `rollout.engine` picks one.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Iterable, Protocol, runtime_checkable

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
    vllm_kv_cache_gb: float = 1.0
    vllm_max_model_len: int = 1024
    vllm_enable_prefix_caching: bool = True
    vllm_block_size: int = 32
    vllm_cpu_threads_bind: str = ""
    vllm_tensor_parallel_size: int = 1
    vllm_gpu_memory_utilization: float = 0.9
    vllm_enforce_eager: bool = False
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
    """An engine that schedules concurrent requests itself (vLLM's async engine, remote
    servers): many episodes await `agenerate` at once and share its continuous batching.
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
ENGINES: Registry[EngineFactory] = Registry("rollout.engine")
register_engine = ENGINES.register


AUTO = "auto"  # `rollout.engine=auto`: the fastest engine installed here


def resolve_engine_name(name: str) -> str:
    """The engine `rollout.engine` means: `auto` is vLLM where it is installed (the fast
    engine), else the transformers engine, with the reason logged; other names as given."""
    if name != AUTO:
        return name
    from rlvr.rollout.vllm_engine import INSTALL_HINT, vllm_available

    if vllm_available():
        return "vllm"
    log.warning("rollout.engine=auto: vLLM is not installed, so the transformers engine "
                "generates (several times slower; %s)", INSTALL_HINT)
    return "transformers"


def create_engine(name: str, model_dir: str | Path, cfg: EngineSettings,
                  eos_token_ids: tuple[int, ...], pad_token_id: int) -> RolloutEngine:
    return ENGINES.lookup(resolve_engine_name(name))(str(model_dir), cfg, eos_token_ids,
                                                     pad_token_id)
