"""The vLLM engine: everything rlvr knows about vLLM that is not the config's or a server's.

- `engine.py`: `VLLMEngine`, vLLM in this process (or in an engine actor), its step loop, sleep
  and weight loading;
- `receiver.py`: the receiving end of weight sync inside vLLM's worker processes (a worker
  extension; inference servers load it too);
- `placement.py`: how vLLM takes memory, graphs and threads on a device (the engine in process
  and servers alike).

Importing this package registers the engine with its facts (`rlvr.rollout.base.Engine`); it
imports no vLLM, so `auto` can ask whether vLLM is installed without paying for its import.
"""

from rlvr.rollout.base import EngineSettings, register_engine
from rlvr.rollout.vllm import engine as _engine


def _available() -> str | None:
    return None if _engine.vllm_available() else _engine.INSTALL_HINT


def _worker_ranks(settings: EngineSettings) -> int:
    # Each worker (one per tensor-parallel rank) joins the weight broadcast as a rank of its own.
    return settings.tensor_parallel_size


register_engine(
    "vllm", available=_available,
    auto_preference=0,  # the fast engine: first wherever it is installed
    # Its start waits on the default process group the local launcher's ranks hold.
    beside_local_ranks=False,
    tensor_parallel=True, can_sleep=True, receiving_ranks=_worker_ranks)(_engine.create_vllm_engine)
