"""Who this process is among the learner's ranks, and joining or leaving their process group.

A `World` is a plain record passed in explicitly (no module singleton of ours); the process
group itself is torch's default group, created by `init_world`. `World.single()` is the
one-process case, which never needs torch.distributed to be initialised.

No scalar collectives live here: the driver sees the whole batch, so the global token count
reaches every rank as a number in `LossParams`, without an all-reduce.

Every collective carries the timeout given to `init_process_group`: with gloo, a peer that dies
mid-collective makes the survivors raise (usually at once, because its sockets close; at the
latest when the timeout runs out), rather than hang. This module does not shard models
(`rlvr.distributed.sharding`) nor split batches (`rlvr.distributed.balance`).
"""

from __future__ import annotations

import datetime
from dataclasses import dataclass

import torch.distributed as dist

DEFAULT_TIMEOUT_S = 600.0


@dataclass(frozen=True)
class World:
    """This process's place among the learner ranks."""

    rank: int
    world_size: int
    backend: str  # "nccl" on CUDA, "gloo" on CPU (rlvr.device); "none" for one process
    timeout_s: float  # every collective raises after this long without its peers

    @staticmethod
    def single() -> "World":
        return World(rank=0, world_size=1, backend="none", timeout_s=DEFAULT_TIMEOUT_S)

    @property
    def is_distributed(self) -> bool:
        return self.world_size > 1

    @property
    def is_main(self) -> bool:
        """Rank 0: the one that logs, saves and sends weights to engines."""
        return self.rank == 0


def init_world(rank: int, world_size: int, init_method: str, backend: str,
               timeout_s: float = DEFAULT_TIMEOUT_S) -> World:
    """Join the default process group (e.g. init_method="tcp://127.0.0.1:29500") with the
    backend of this rank's device (`Device.backend`; bind the device first on CUDA).

    The timeout bounds the rendezvous and every later collective on this group.
    """
    if world_size < 1 or not 0 <= rank < world_size:
        raise ValueError(f"rank {rank} is not in a world of size {world_size}")
    dist.init_process_group(backend=backend, init_method=init_method, rank=rank,
                            world_size=world_size,
                            timeout=datetime.timedelta(seconds=timeout_s))
    return World(rank=rank, world_size=world_size, backend=backend, timeout_s=timeout_s)


def destroy_world(world: World) -> None:
    if world.is_distributed and dist.is_initialized():
        dist.destroy_process_group()
