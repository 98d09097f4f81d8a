"""Inference servers as Ray actors (`distributed.launcher=ray`, `rollout.engine=remote`).

Each server is a child process of one small actor, so Ray places it (on a node with
`tensor_parallel_size` free GPUs, which Ray then shows it through CUDA_VISIBLE_DEVICES)
and a killed actor takes its server with it (the parent-death signal of
`rlvr.launch.servers`). Each server binds its node's address as Ray gives it (the interface
the cluster uses, not every interface) and requires the run's key, which travels to its actor
as an argument (Ray's own channel) and to the server in its environment; the trainer reaches
each server at that address.
"""

from __future__ import annotations

import logging
from dataclasses import replace
from pathlib import Path
from typing import Callable

from rlvr.config import Config
from rlvr.device import HOST, cluster_bf16, cluster_device_type
from rlvr.launch.servers import _die_with_parent, server_settings
from rlvr.serving.auth import prepare_run_key
from rlvr.serving.server import ServerProcess, ServerSettings

log = logging.getLogger(__name__)


class ServerActorBody:
    """The body of a server actor: starts the server on this node, answers its address."""

    def __init__(self, settings: ServerSettings, log_path: str, startup_timeout_s: float,
                 command: Callable[[ServerSettings], list[str]] | None = None,
                 key: str | None = None):
        from rlvr.distributed.ray_session import node_ip

        self._node = node_ip()
        # Bound on the node's address only, where the trainer reaches it.
        self.server = ServerProcess(replace(settings, host=self._node), Path(log_path),
                                    preexec_fn=_die_with_parent, command=command, key=key)
        self.server.start(startup_timeout_s)

    def address(self) -> str:
        return f"http://{self._node}:{self.server.settings.port}"

    def alive(self) -> bool:
        return self.server.alive()

    def stop(self) -> None:
        self.server.stop()


class RayServers:
    """`rollout.num_servers` server actors; a context manager like `LocalServers`. They
    require the run's key (`prepare_run_key`: written to `<output_dir>/server.key`, `.key`)."""

    def __init__(self, cfg: Config, model_dir: str, log_dir: Path,
                 command: Callable[[ServerSettings], list[str]] | None = None):
        self.cfg, self.model_dir, self.log_dir = cfg, model_dir, Path(log_dir)
        self.command = command  # None: the serving engine (`server_command`); tests: a stand-in
        self.actors: list = []
        self.addresses: list[str] = []
        self.key = ""

    def __enter__(self) -> "RayServers":
        import ray

        from rlvr.distributed.ray_session import cluster_gpus, ensure_ray

        cfg, r = self.cfg, self.cfg.rollout
        ensure_ray(cfg.distributed.ray_address or None, cfg.world_size + r.num_servers)
        device_type = cluster_device_type(cfg.model.device, cluster_gpus())
        gpu = device_type != HOST.type
        settings = server_settings(cfg, self.model_dir, device_type,
                                   cluster_bf16(device_type, cfg.model.bf16_autocast))
        options = ({"num_gpus": r.tensor_parallel_size, "num_cpus": 1} if gpu
                   else {"num_cpus": 1})
        actor_cls = ray.remote(ServerActorBody)
        self.key = prepare_run_key(cfg.experiment.output_dir)
        try:
            self.actors = [actor_cls.options(**options).remote(
                settings, str(self.log_dir / f"server_{i}.log"), r.server_startup_timeout_s,
                self.command, self.key)
                for i in range(r.num_servers)]
            self.addresses = ray.get([a.address.remote() for a in self.actors],
                                     timeout=r.server_startup_timeout_s + 60)
        except BaseException:
            self.stop()
            raise
        log.info("inference servers on Ray: %s", ", ".join(self.addresses))
        return self

    def __exit__(self, *exc) -> None:
        self.stop()

    def stop(self) -> None:
        import ray

        for actor in self.actors:
            try:
                ray.get(actor.stop.remote(), timeout=30)
            except Exception:  # noqa: BLE001  dead already, or stuck: kill it (and its server)
                pass
            ray.kill(actor)
        self.actors = []
