"""`launch(cfg)`: train under `distributed.launcher`, starting the servers the run needs first.

The trainer never learns who started its servers: it gets their addresses in its config
(`rollout.server_addresses`, a new config record, not the caller's mutated) and talks to them
as to any server.
"""

from __future__ import annotations

import dataclasses
import logging
from contextlib import AbstractContextManager
from pathlib import Path

from rlvr.config import Config
from rlvr.rollout.remote_engine import server_addresses

log = logging.getLogger(__name__)


def needs_servers(cfg: Config) -> bool:
    """True when the run generates on servers and nobody gave their addresses."""
    return cfg.rollout.engine == "remote" and not server_addresses(cfg.rollout.server_addresses)


def with_servers(cfg: Config, addresses: list[str]) -> Config:
    return dataclasses.replace(cfg, rollout=dataclasses.replace(cfg.rollout,
                                                                server_addresses=addresses))


def launch(cfg: Config):
    """Train `cfg` (returns the trainer's `Run`); servers started here stop when it ends."""
    from rlvr.trainer import train

    launcher = cfg.distributed.launcher
    if launcher == "slurm" and needs_servers(cfg):
        from rlvr.launch.slurm import submit_and_wait

        return submit_and_wait(cfg)  # the job's trainer step runs `launch` again, with servers
    if not needs_servers(cfg):
        return train(cfg)
    with _start_servers(cfg) as servers:
        return train(with_servers(cfg, servers.addresses))


def _start_servers(cfg: Config) -> AbstractContextManager:
    from rlvr.device import resolve_device
    from rlvr.launch.servers import LocalServers, server_settings
    from rlvr.models import resolve_model_dir

    r = cfg.rollout
    model_dir = resolve_model_dir(cfg.model.name_or_path)
    log_dir = Path(cfg.experiment.output_dir) / "servers"
    if cfg.distributed.launcher == "ray":
        from rlvr.launch.ray_servers import RayServers

        return RayServers(cfg, model_dir, log_dir)
    here = resolve_device(cfg.model.device)
    device = here.type
    settings = server_settings(cfg, model_dir, device, here.bf16_compute(cfg.model.bf16_autocast))
    if device == "cuda":  # ---- GPU only: the learner keeps GPU 0, each server tp of its own
        return LocalServers(settings, r.num_servers, log_dir, r.server_port,
                            r.server_startup_timeout_s,
                            visible_devices=[",".join(str(1 + i * r.vllm_tensor_parallel_size + k)
                                                      for k in range(r.vllm_tensor_parallel_size))
                                             for i in range(r.num_servers)])
    return LocalServers(settings, r.num_servers, log_dir, r.server_port,
                        r.server_startup_timeout_s)
