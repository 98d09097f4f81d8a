"""`launch(cfg)`: train under `distributed.launcher`, starting the servers the run needs first.

The trainer never learns who started its servers: it gets their addresses in its config
(`rollout.server_addresses`, a new config record, not the caller's mutated) and talks to them
as to any server.

Nothing is started or written before the run is checked: before the local and Ray launchers
start servers or learner ranks, `rlvr.run.build.plan_start` checks the input (as the Slurm launcher
does before it submits) and decides where the run starts, so bad input, a refused resume or a
finished run starts no process and writes no file (`server.key` included); the trainer takes
the plan on, so nothing is read twice.
"""

from __future__ import annotations

import contextlib
import dataclasses
import logging
from contextlib import AbstractContextManager
from pathlib import Path

from rlvr.config import Config, ConfigError
from rlvr.rollout import ENGINES
from rlvr.rollout.remote.engine import server_addresses

log = logging.getLogger(__name__)


def needs_servers(cfg: Config) -> bool:
    """True when the run generates on servers and nobody gave their addresses."""
    engine = ENGINES.get(cfg.rollout.engine)  # None for `auto`, which never picks servers
    return engine is not None and engine.uses_servers \
        and not server_addresses(cfg.rollout.server_addresses)


def with_servers(cfg: Config, addresses: list[str]) -> Config:
    return dataclasses.replace(cfg, rollout=dataclasses.replace(cfg.rollout,
                                                                server_addresses=addresses))


def launch(cfg: Config):
    """Train `cfg` (returns the trainer's `Run`); servers started here stop when it ends.

    Under a torch.distributed environment (torchrun, srun, or the ranks `LocalRanks` starts)
    only rank 0 trains; every other rank serves it (`rlvr.distributed.ranks.follow`) and this
    returns None there."""
    from rlvr.run.build import plan_start
    from rlvr.distributed.ranks import RankEnv
    from rlvr.run.loop import train

    env = RankEnv.from_environ()
    if env is not None and env.rank != 0:
        return _follow(cfg, env)
    launcher = cfg.distributed.launcher
    if launcher == "slurm" and needs_servers(cfg):
        from rlvr.launch.slurm import submit_and_wait

        return submit_and_wait(cfg)  # the job's trainer step runs `launch` again, with servers
    # Before any server or learner rank starts: bad input, a finished run or a refused resume
    # starts nothing and writes nothing (`server.key` included); `train` takes the plan on.
    start = plan_start(cfg)
    ranks = _learner_ranks(cfg, env)
    # Servers first, then the ranks: the other ranks' rendezvous deadline
    # (distributed.collective_timeout_s) starts with them, and a server start as slow as its
    # own timeout allows (rollout.server_startup_timeout_s) would have run it out.
    with _start_servers(cfg) if needs_servers(cfg) else contextlib.nullcontext() as servers:
        run_cfg = with_servers(cfg, servers.addresses) if servers is not None else cfg
        with ranks if ranks is not None else contextlib.nullcontext():
            return train(run_cfg, start)


def _learner_ranks(cfg: Config, env) -> AbstractContextManager | None:
    """The local launcher's ranks 1..N-1 (`LocalRanks`, not started yet) when the run has
    several learners and nobody started them (torchrun and srun do; under Ray the trainer's
    actors are the ranks); None otherwise."""
    if cfg.world_size == 1 or env is not None or cfg.distributed.launcher == "ray":
        return None
    from rlvr.launch.local_ranks import LocalRanks

    return LocalRanks(cfg)


def _follow(cfg: Config, env) -> None:
    from rlvr.distributed.ranks import follow
    from rlvr.plugins import import_plugins

    import_plugins(cfg.experiment.plugins)  # rank 0 names their losses (`rlvr.plugins`)

    if env.world_size != cfg.world_size:
        raise ConfigError(f"distributed.num_learners_per_node="
                          f"{list(cfg.distributed.num_learners_per_node)} is {cfg.world_size} "
                          f"learners, but WORLD_SIZE={env.world_size}")
    follow(cfg.model.device, cfg.distributed.collective_timeout_s, env)
    return None


def _start_servers(cfg: Config) -> AbstractContextManager:
    from rlvr.device import resolve_device
    from rlvr.launch.servers import LocalServers, server_settings
    from rlvr.models import resolve_model_dir
    from rlvr.serving.auth import prepare_run_key

    r = cfg.rollout
    model_dir = resolve_model_dir(cfg.model.name_or_path)
    log_dir = Path(cfg.experiment.output_dir) / "servers"
    if cfg.distributed.launcher == "ray":
        from rlvr.launch.ray_servers import RayServers

        return RayServers(cfg, model_dir, log_dir)
    here = resolve_device(cfg.model.device)
    device = here.type
    settings = server_settings(cfg, model_dir, device, here.bf16_compute(cfg.model.bf16_autocast))
    key = prepare_run_key(cfg.experiment.output_dir)  # <output_dir>/server.key: the trainer's
    if device == "cuda":  # ---- GPU only: the learners keep GPUs 0..N-1, each server tp of its own
        first, tp = cfg.world_size, r.tensor_parallel_size
        return LocalServers(settings, r.num_servers, log_dir, r.server_port,
                            r.server_startup_timeout_s, key=key,
                            visible_devices=[",".join(str(first + i * tp + k) for k in range(tp))
                                             for i in range(r.num_servers)])
    return LocalServers(settings, r.num_servers, log_dir, r.server_port,
                        r.server_startup_timeout_s, key=key)
