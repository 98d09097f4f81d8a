"""How vLLM takes a device: its memory, graphs and threads, one rule for the engine in process
(`rlvr.rollout.vllm.engine`) and for servers (`rlvr.serving.server`).

Which device a process computes on is `rlvr.device`'s decision; this module only says what
vLLM, given that device type, must be told. Imports no vLLM.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from typing import Any


@dataclass(frozen=True)
class VLLMPlacement:
    """How vLLM takes a device: `engine_args` as `vllm.LLM` keyword arguments (a server gets
    them as its command-line flags), `env` the variables vLLM reads at import (defaults: a
    value the user set wins)."""

    engine_args: dict[str, Any]
    env: dict[str, str] = field(default_factory=dict)


def vllm_placement(device_type: str, *, gpu_memory_utilization: float, kv_cache_gb: float,
                   enforce_eager: bool, cpu_threads_bind: str = "") -> VLLMPlacement:
    """vLLM's memory, graph and thread settings for `device_type`, one rule for the engine in
    process (`rlvr.rollout.vllm.engine`) and for servers (`rlvr.serving.server`).
    - GPU: a share of the device's memory, which sizes the KV cache; CUDA graphs unless
      `enforce_eager`.
    - CPU: a fixed KV cache (`kv_cache_gb`), or vLLM reserves most of the RAM; no graphs
      (eager only); vLLM's OpenMP threads bound to every core, or to `cpu_threads_bind` (its
      own default binds one and reserves another for a front end)."""
    if device_type == "cuda":  # ---- GPU only
        return VLLMPlacement({"gpu_memory_utilization": gpu_memory_utilization,
                              "enforce_eager": enforce_eager})
    return VLLMPlacement(
        {"kv_cache_memory_bytes": int(kv_cache_gb * 2**30), "enforce_eager": True},
        {"VLLM_CPU_NUM_OF_RESERVED_CPU": "0",
         "VLLM_CPU_OMP_THREADS_BIND": cpu_threads_bind or f"0-{(os.cpu_count() or 1) - 1}"})


