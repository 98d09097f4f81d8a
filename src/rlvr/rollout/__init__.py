"""Rollout engines behind one protocol. Importing this package registers the built-in engines."""

from rlvr.rollout.base import (ENGINES, EngineSettings, EngineUnavailable, RolloutEngine,
                               create_engine, register_engine)
from rlvr.rollout import transformers_engine as _transformers_engine  # noqa: F401  (registers)
from rlvr.rollout import vllm_engine as _vllm_engine  # noqa: F401  (registers; imports no vLLM)
from rlvr.rollout import remote_engine as _remote_engine  # noqa: F401  (registers; HTTP only)

__all__ = ["ENGINES", "EngineSettings", "EngineUnavailable", "RolloutEngine", "create_engine",
           "register_engine"]
