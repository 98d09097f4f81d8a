"""One rollout engine in a process of its own: the body of an engine actor.

`EngineWorker` is a plain class; `EngineGroup` runs it as a threaded Ray actor (several calls at
once: a generation, an evaluation and a weight receive may overlap, as they do on an engine in
the trainer's process, and the engines' own locks order them). It builds any registered engine
(`rollout.engine`), so engine code never knows it is remote.

Weights arrive by `receive_weights`: the first call joins the sender's broadcast group (the
trainer, or learner rank 0), every call waits for one push and loads it. Joining lazily, in the
same call, keeps the order right on a threaded actor, where two separate calls could run in
either order.
"""

from __future__ import annotations

import threading

import torch

from rlvr.device import resolve_device
from rlvr.distributed.ray_session import actor_resources
from rlvr.plugins import import_from_environment
from rlvr.rollout import create_engine
from rlvr.rollout.base import EngineSettings
from rlvr.rollout.weight_sync.broadcast import BroadcastReceiver
from rlvr.types import Completion, SamplingParams

Endpoint = tuple[str, int]  # (host, port) of the sender's rendezvous


class EngineWorker:
    def __init__(self, engine_name: str, model_dir: str, cfg: EngineSettings,
                 eos_token_ids: tuple[int, ...], pad_token_id: int, num_threads: int = 0):
        import_from_environment()  # the run's plugins: its engine may be one of theirs
        if num_threads > 0:  # for engines on torch's threads (an engine may set its own)
            torch.set_num_threads(num_threads)
        self.engine = create_engine(engine_name, model_dir, cfg, eos_token_ids, pad_token_id)
        self._receiver: BroadcastReceiver | None = None
        self._receive_lock = threading.Lock()
        self._joined: Endpoint | None = None  # the group the engine's own workers joined
        self._receiver_at: Endpoint | None = None  # where `_receiver`'s group formed
        # Where weights pushed over NCCL land: this actor's GPU (gloo pushes use host memory).
        self._weights_device = resolve_device(cfg.device).torch

    def ready(self) -> bool:
        """Returns once the engine is built (the constructor ran): a start-up barrier."""
        return True

    def node(self) -> tuple[str, str]:
        """(Ray node id, node IP) this actor runs on, once the engine is built: where a lost
        node's warning points (`engine_membership`)."""
        import ray

        return ray.get_runtime_context().get_node_id(), ray.util.get_node_ip_address()

    def resources(self) -> dict[str, str]:
        """The GPUs Ray gave this engine actor (an engine uses what CUDA_VISIBLE_DEVICES
        shows)."""
        return actor_resources()

    def generate(self, prompts: list[list[int]], params: SamplingParams) -> list[list[Completion]]:
        return self.engine.generate(prompts, params)

    def receive_weights(self, endpoint: Endpoint, first_rank: int, world_size: int,
                        timeout_s: float) -> int | None:
        """Wait for one push from the sender at `endpoint` and load it; the version loaded, or
        None when the sender closed. This engine's receiving ranks start at `first_rank` of
        the group of `world_size` (the sender is rank 0); the sender chose the backend (gloo
        or NCCL) and bucket size. An engine with workers of its own (`join_weight_group`)
        receives in them, one rank each, so tensor-parallel shards load on their own GPUs;
        another engine, in this process, in one streamed `update_weights` call."""
        # A new endpoint is a new group: the sender formed one without a lost engine, or
        # with a new one (`engine_membership`); the old group is left behind.
        endpoint = tuple(endpoint)
        with self._receive_lock:
            host, port = endpoint
            if hasattr(self.engine, "join_weight_group"):
                if self._joined != endpoint:
                    self.engine.join_weight_group(host, port, first_rank, world_size, timeout_s)
                    self._joined = endpoint
                return self.engine.receive_pushed_weights()
            if self._receiver is None or self._receiver_at != endpoint:
                self._receiver = None  # the old group's sockets close with it
                self._receiver = BroadcastReceiver(host, port, first_rank, world_size - 1,
                                                   timeout_s, device=self._weights_device)
                self._receiver_at = endpoint
            return self._receiver.receive_into(self.engine)

    def close(self) -> None:
        self.engine.close()
