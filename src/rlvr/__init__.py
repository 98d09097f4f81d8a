"""rlvr: reinforcement learning from verifiable rewards (GRPO and its variants) for Hugging Face
causal LMs.

The surface a user scripts against:

    import rlvr

    @rlvr.register_verifier("exact_sum")
    def exact_sum(completion: str, ground_truth: str) -> float:
        return float(completion.strip() == ground_truth)

    rlvr.configure_logging()  # rlvr's progress lines on stderr, the libraries' chatter off
    cfg = rlvr.load_config("configs/tiny.yaml", ["rewards.remap_verifier={last_number: exact_sum}"])
    run = rlvr.train(cfg)

Names resolve on first use (PEP 562), so `import rlvr` stays cheap: verifier worker processes
import `rlvr.rewards` without loading torch or the trainer.
"""

from __future__ import annotations

import importlib
from typing import Any

from rlvr import moved as _moved

# public name -> the module that defines it
_EXPORTS = {
    "Config": "rlvr.config", "ConfigError": "rlvr.config", "load_config": "rlvr.config",
    "train": "rlvr.run.loop", "build_run": "rlvr.run.build", "Run": "rlvr.run.build",
    "VERIFIERS": "rlvr.rewards.registry", "register_verifier": "rlvr.rewards.registry",
    "POLICY_LOSSES": "rlvr.algorithm.losses", "register_policy_loss": "rlvr.algorithm.losses",
    "ADVANTAGE_NORMALIZATIONS": "rlvr.algorithm.advantages",
    "register_advantage_normalization": "rlvr.algorithm.advantages",
    "ENGINES": "rlvr.rollout.base", "register_engine": "rlvr.rollout.base",
    "WORKFLOWS": "rlvr.workflows.base", "register_workflow": "rlvr.workflows.base",
    "Trajectory": "rlvr.workflows.base", "TrajectoryBuilder": "rlvr.workflows.base",
    "EpisodeContext": "rlvr.workflows.base",
    "configure_logging": "rlvr.console",
}
__all__ = sorted(_EXPORTS)

_moved.install()  # `import rlvr.trainer` names where the module went (rlvr.moved)


def __getattr__(name: str) -> Any:
    if name not in _EXPORTS:
        raise AttributeError(f"module 'rlvr' has no attribute {name!r}")
    return getattr(importlib.import_module(_EXPORTS[name]), name)


def __dir__() -> list[str]:
    return __all__
