"""The rollout engine protocol: token ids in, sampled token ids and their logprobs out.

An engine knows nothing about rewards, chat templates or training; it samples continuations and
accepts new weights. Engines register a factory by name so `rollout.engine` picks one.
"""

from __future__ import annotations

from pathlib import Path
from typing import Callable, Iterable, Protocol

import torch

from rlvr.config import RolloutConfig
from rlvr.registry import Registry
from rlvr.types import Completion, SamplingParams


class RolloutEngine(Protocol):
    def generate(self, prompts: list[list[int]], params: SamplingParams) -> list[list[Completion]]:
        """For each prompt, `params.n` completions (in prompt order)."""
        ...

    def update_weights(self, named_tensors: Iterable[tuple[str, torch.Tensor]], version: int) -> None:
        """Load new weights in place; completions produced afterwards carry `version`."""
        ...

    def close(self) -> None: ...


# Factory signature: (model_dir, rollout config, eos/stop token ids, pad id) -> engine.
EngineFactory = Callable[[str, RolloutConfig, tuple[int, ...], int], RolloutEngine]
ENGINES: Registry[EngineFactory] = Registry("rollout.engine")
register_engine = ENGINES.register


def create_engine(name: str, model_dir: str | Path, cfg: RolloutConfig,
                  eos_token_ids: tuple[int, ...], pad_token_id: int) -> RolloutEngine:
    return ENGINES.lookup(name)(str(model_dir), cfg, eos_token_ids, pad_token_id)
