"""Modules that moved, and where they are now: `import rlvr.trainer` (a name scripts written
against an earlier rlvr use) fails with a ModuleNotFoundError that names the new module, rather
than Python's bare "No module named". Installed by `rlvr/__init__.py` as a finder consulted
last, so it costs nothing for a module that exists.

Moves, newest last (issue 49, one house): the loop and its companions into `rlvr.run`; each
engine into its own subpackage of `rlvr.rollout`; weight sync into `rlvr.rollout.weight_sync`.
"""

from __future__ import annotations

import sys
from importlib.abc import MetaPathFinder

MOVED: dict[str, str] = {
    "rlvr.trainer": "rlvr.run.loop",
    "rlvr.build": "rlvr.run.build",
    "rlvr.settings": "rlvr.run.settings",
    "rlvr.run_state": "rlvr.run.state",
    "rlvr.stopping": "rlvr.run.stopping",
    "rlvr.faults": "rlvr.run.faults",
    "rlvr.interrupts": "rlvr.run.interrupts (its errors: rlvr.run.errors)",
    "rlvr.input_checks": "rlvr.run.input_checks",
    "rlvr.offline_eval": "rlvr.run.offline_eval",
    "rlvr.health": "rlvr.run.health",
    "rlvr.rollout.vllm_engine": "rlvr.rollout.vllm.engine",
    "rlvr.rollout.vllm_weight_receiver": "rlvr.rollout.vllm.receiver",
    "rlvr.rollout.transformers_engine": "rlvr.rollout.transformers.engine",
    "rlvr.rollout.static_decode": "rlvr.rollout.transformers.static_decode",
    "rlvr.rollout.remote_engine": "rlvr.rollout.remote.engine",
    "rlvr.rollout.server_weights": "rlvr.rollout.weight_sync.servers",
}


class MovedModuleFinder(MetaPathFinder):
    """Refuses an import of a moved module, naming where it went."""

    def find_spec(self, fullname, path=None, target=None):
        if fullname in MOVED:
            raise ModuleNotFoundError(f"{fullname} moved: import {MOVED[fullname]} "
                                      "(docs/reference/layout.md)", name=fullname)
        return None


def install() -> None:
    if not any(isinstance(f, MovedModuleFinder) for f in sys.meta_path):
        sys.meta_path.append(MovedModuleFinder())
