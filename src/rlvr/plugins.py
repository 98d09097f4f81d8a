"""Plugins: the user's modules that register variants, imported in every process a run starts.

A plugin is a plain module that registers what it defines when imported (`@register_policy_loss`,
`@register_verifier`, `@register_workflow`...). The config lists such modules in
`experiment.plugins`; `import_plugins` imports them in the trainer before any name is looked
up, and records the list and the directories they came from in this process's environment
(`PLUGINS_ENV`, `PLUGIN_PATH_ENV`), which every process the run starts inherits: learner ranks
(child processes, Slurm steps), verifier workers, and Ray actors, whose runtime environment
carries the two variables (`rlvr.distributed.ray_session.thread_env`). Those processes call
`import_from_environment` before they look a name up. The environment is the channel because
it is what every kind of child process already inherits, whoever starts it; the sandbox's
weak-mode switch travels the same way.

A name can also point into a module directly: `package.module:attr` (`rlvr.registry`), imported
with the run's directory on the path (`import_module`).

What no other process can import is refused at start (`check_main_entries`): a variant
registered in `__main__` (a script, a notebook), where the run would need it in another process.

Standard library only: a verifier worker imports this before anything heavy.
"""

from __future__ import annotations

import importlib
import os
import sys
from collections.abc import Sequence
from pathlib import Path
from types import ModuleType
from typing import TYPE_CHECKING

from rlvr.registry import MAIN

if TYPE_CHECKING:
    from rlvr.config import Config
    from rlvr.registry import Registry

PLUGINS_ENV = "RLVR_PLUGINS"  # the run's plugin modules, comma-separated
PLUGIN_PATH_ENV = "RLVR_PLUGIN_PATH"  # directories they import from (os.pathsep-separated)
FIELD = "experiment.plugins"


def import_module(name: str) -> ModuleType:
    """`importlib.import_module(name)`, with the directory the process runs in and the run's
    plugin directories (`PLUGIN_PATH_ENV`) on the path, as for `python -m` (the `rlvr` console
    script alone would not see a module next to the config). Appended: they shadow nothing."""
    for entry in [os.getcwd(), *_split(os.environ.get(PLUGIN_PATH_ENV, ""), os.pathsep)]:
        if entry not in sys.path:
            sys.path.append(entry)
    return importlib.import_module(name)


def import_plugins(modules: Sequence[str], field: str = FIELD) -> None:
    """Import each module of `modules` (the config's `experiment.plugins`) and record them for
    the processes this one starts. ConfigError, one line naming the module and `field`, for a
    module that fails to import (before any model loads, the CLI exits 2)."""
    for name in modules:
        try:
            import_module(name)
        except Exception as e:  # noqa: BLE001  importing runs the user's module: anything
            from rlvr.config import ConfigError

            text = str(e).splitlines()[0] if str(e) else ""
            raise ConfigError(f"{field}: cannot import {name!r}: {type(e).__name__}: "
                              f"{text}") from e
    os.environ.update(plugin_environment(modules))


def plugin_environment(modules: Sequence[str]) -> dict[str, str]:
    """The variables that carry `modules` (imported already) to another process: the list, and
    the directories to import them from (this process's working directory, for `module:attr`
    names resolved there, and each module's root on the path)."""
    roots = [os.getcwd()] + [str(root) for m in modules if m in sys.modules
                             if (root := _root(sys.modules[m], m)) is not None]
    return {PLUGINS_ENV: ",".join(modules),
            PLUGIN_PATH_ENV: os.pathsep.join(dict.fromkeys(roots))}


def forwarded_environment() -> dict[str, str]:
    """This process's plugin variables, for a Ray actor's runtime environment (Ray actors do not
    inherit the driver's environment)."""
    return {key: os.environ[key] for key in (PLUGINS_ENV, PLUGIN_PATH_ENV) if key in os.environ}


def import_from_environment() -> list[str]:
    """Import the plugins the starting process recorded (`PLUGINS_ENV`); the modules imported.
    A module that fails raises ImportError naming `experiment.plugins` (the process that
    started this one imported it, so it is the path that differs here)."""
    modules = _split(os.environ.get(PLUGINS_ENV, ""), ",")
    for name in modules:
        try:
            import_module(name)
        except Exception as e:  # noqa: BLE001
            raise ImportError(f"{FIELD}: cannot import {name!r} in process {os.getpid()} "
                              f"(sys.path {sys.path}): {type(e).__name__}: {e}") from e
    return modules


def check_main_entries(cfg: "Config") -> None:
    """ConfigError, one line, when the run needs a variant registered in `__main__` (a script or
    notebook) in a process that cannot import it: verifiers in verifier workers or the
    data-preparation actor, the workflow there too, the loss in learner ranks or Ray actors,
    the engine in engine actors, anything under Slurm (the trainer itself runs in the job).
    In one process (rewards.num_workers=0, one local learner) they work and pass."""
    from rlvr.algorithm.losses import POLICY_LOSSES
    from rlvr.config import ConfigError
    from rlvr.rewards.registry import VERIFIERS
    from rlvr.rollout import ENGINES
    from rlvr.workflows import WORKFLOWS

    d, r = cfg.distributed, cfg.rollout
    slurm = "the Slurm job's processes (distributed.launcher=slurm)"
    prep = "the data-preparation actor (distributed.data_prep_actor=true)"
    learners = (slurm if d.launcher == "slurm" else
                "the Ray learner actors (distributed.launcher=ray)" if d.launcher == "ray" else
                f"the learner ranks (distributed.num_learners_per_node="
                f"{list(d.num_learners_per_node)})" if cfg.world_size > 1 else None)
    scorers = (slurm if d.launcher == "slurm" else prep if d.data_prep_actor else
               f"the verifier worker processes (rewards.num_workers={cfg.rewards.num_workers}; "
               "0 scores in this process)" if cfg.rewards.num_workers > 0 else None)
    engines = slurm if d.launcher == "slurm" else \
        f"the engine actors (rollout.num_engines={r.num_engines})" if r.num_engines > 0 else None
    workflows = slurm if d.launcher == "slurm" else prep if d.data_prep_actor else None
    chosen = [("algorithm.loss_fn", cfg.algorithm.loss_fn, POLICY_LOSSES, learners),
              ("rollout.engine", r.engine, ENGINES, engines),
              ("rollout.workflow", r.workflow, WORKFLOWS, workflows)]
    refused = [(f"{field}={name!r}", where) for field, name, registry, where in chosen
               if where and _in_main(name, registry)]
    named = [*cfg.rewards.custom_verifiers, *cfg.rewards.remap_verifier.values()]
    verifiers = sorted({*VERIFIERS.defined_in_main(),
                        *(n for n in named if _in_main(n, VERIFIERS))})
    if scorers and verifiers:
        refused.append((f"verifier {', '.join(repr(v) for v in verifiers)}", scorers))
    if len(refused) == 1:
        (what, where), = refused
        raise ConfigError(f"{what} is defined in __main__ (a script or notebook), which "
                          f"{where} cannot import: move it into a module and list that module "
                          f"in {FIELD}")
    if refused:
        each = "; ".join(f"{what} (needed in {where})" for what, where in refused)
        raise ConfigError(f"defined in __main__ (a script or notebook), which the run's other "
                          f"processes cannot import: {each}: move them into a module and list "
                          f"that module in {FIELD}")


def _in_main(name: str, registry: "Registry") -> bool:
    return name.startswith(MAIN + ":") or name in registry.defined_in_main()


def _root(module: ModuleType, name: str) -> Path | None:
    """The directory on the path that `name` imports from: its file's directory, one level up
    for each dot (and one more for a package's __init__); None for a module without a file."""
    file = getattr(module, "__file__", None)
    if not file:
        return None
    path = Path(file).resolve()
    levels = name.count(".") + (2 if path.name == "__init__.py" else 1)
    return path.parents[levels - 1]


def _split(text: str, sep: str) -> list[str]:
    return [part for part in text.split(sep) if part]
