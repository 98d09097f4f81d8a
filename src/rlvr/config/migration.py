"""Config names that changed, and what they are called now: a config (a YAML file, a saved
run's config.yaml, a `key=value` override) that uses an old name is refused with one line per
name saying its new one (`ConfigError`, exit code 2), rather than OmegaConf's "Key ... is not
in struct", which names no successor.

Renames, newest last:
- rlvr 0.x, issue 49: the engine count and tensor-parallel size belong to every engine
  (`rollout.num_engines`, `rollout.tensor_parallel_size`); the vLLM engine's own options moved
  into its section, `rollout.vllm`.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from rlvr.config.fields import ConfigError

RENAMED: dict[str, str] = {
    "rollout.vllm_num_engines": "rollout.num_engines",
    "rollout.vllm_tensor_parallel_size": "rollout.tensor_parallel_size",
    **{f"rollout.vllm_{name}": f"rollout.vllm.{name}" for name in (
        "kv_cache_gb", "max_model_len", "enable_prefix_caching", "block_size",
        "cpu_threads_bind", "gpu_memory_utilization", "enforce_eager")},
}


def renamed_in(keys: Iterable[str], where: str) -> list[str]:
    """One message per dotted key of `keys` that is an old name, naming its new one."""
    return [f"config field '{key}'{where} was renamed: use {RENAMED[key]}"
            for key in keys if key in RENAMED]


def tree_keys(tree: Any, prefix: str = "") -> Iterable[str]:
    """The dotted path of every key of a nested mapping (a loaded YAML file)."""
    if isinstance(tree, Mapping):
        for key, value in tree.items():
            path = f"{prefix}{key}"
            yield path
            yield from tree_keys(value, f"{path}.")


def refuse_renamed(keys: Iterable[str], where: str) -> None:
    """ConfigError listing every old name among `keys`."""
    errors = renamed_in(keys, where)
    if len(errors) == 1:
        raise ConfigError(errors[0])
    if errors:
        raise ConfigError("invalid config:\n  - " + "\n  - ".join(errors))
