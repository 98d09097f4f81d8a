"""Rollout engines behind one protocol (`base`), one subpackage per engine, and how weights
reach them (`weight_sync`).

Importing this package imports every engine subpackage, which registers its engine: a new
built-in engine is a new subpackage and nothing here changes. An engine subpackage imports its
engine's heavy library only when an engine is built.
"""

import importlib as _importlib
import pkgutil as _pkgutil

from rlvr.rollout.base import (ENGINES, Engine, EngineSettings, EngineUnavailable, RolloutEngine,
                               create_engine, engine_record, register_engine)

NOT_ENGINE_SUBPACKAGES = {"weight_sync"}  # subpackages of rollout that hold no engine

for _sub in _pkgutil.iter_modules(__path__):
    if _sub.ispkg and _sub.name not in NOT_ENGINE_SUBPACKAGES:
        _importlib.import_module(f"{__name__}.{_sub.name}")  # registers its engine

__all__ = ["ENGINES", "Engine", "EngineSettings", "EngineUnavailable", "RolloutEngine",
           "create_engine", "engine_record", "register_engine"]
