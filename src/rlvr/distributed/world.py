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

A collective that runs out of time raises torch's bare "Timed out waiting 600000ms for recv
operation" (gloo), which names no peer. `missing_ranks` asks who is missing: a monitored
barrier (gloo's, which lists the ranks that do not arrive) on a group kept for that alone, as
a group whose collective timed out has closed its connections. `CollectiveTimeout` is the one
line that follows: what timed out, after how long, and the ranks (and hosts) that did not
answer.
"""

from __future__ import annotations

import datetime
import re
from dataclasses import dataclass
from typing import Any, Sequence

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


class CollectiveTimeout(RuntimeError):
    """A collective across ranks ran out of `distributed.collective_timeout_s`; one line naming
    what timed out and the peers that did not answer (rank and host), where known."""

    def __init__(self, what: str, timeout_s: float, missing: Sequence[int] | None,
                 hosts: Sequence[str] | None = None):
        self.what, self.timeout_s = what, timeout_s
        self.missing = list(missing) if missing is not None else None
        super().__init__(f"{what} timed out after {timeout_s:g} s (distributed.collective_"
                         f"timeout_s): {describe_missing(self.missing, hosts)}")


def describe_missing(missing: Sequence[int] | None, hosts: Sequence[str] | None = None) -> str:
    """'rank 1 (host h) did not answer', or the ranks' list; who, when nobody could tell."""
    if missing is None:
        return "the peer that did not answer is unknown (the probe of the ranks failed too)"
    if not missing:
        return "every rank answered the probe afterwards (a peer was slow, not gone)"
    named = [f"rank {r}" + (f" on {hosts[r]}" if hosts and r < len(hosts) else "")
             for r in missing]
    return f"{', '.join(named)} did not answer"


def is_timeout(error: BaseException) -> bool:
    """Whether a collective's error is its timeout running out (gloo: "Timed out waiting
    ...ms"; NCCL's watchdog: "Watchdog caught collective operation timeout"; a store's wait),
    not a peer's sockets closing or a bad argument."""
    return isinstance(error, RuntimeError) and bool(
        re.search(r"timed out|timeout", str(error), re.IGNORECASE))


# A probe shorter than the collective's own timeout: a peer that answers at all answers at once.
PROBE_MAX_S = 10.0


def missing_ranks(probe_group: Any, timeout_s: float) -> list[int] | None:
    """Rank 0, after a collective timed out: the ranks that do not reach a monitored barrier
    on `probe_group` (a gloo group used only for probes) within min(timeout_s, PROBE_MAX_S);
    [] when all do; None when the probe fails otherwise. Every rank whose collective timed out
    must call it (`join_probe` on the others)."""
    timeout = datetime.timedelta(seconds=min(timeout_s, PROBE_MAX_S))
    try:
        dist.monitored_barrier(group=probe_group, timeout=timeout, wait_all_ranks=True)
    except RuntimeError as e:
        found = re.search(r"Ranks? ([\d, ]+) failed to pass monitoredBarrier", str(e))
        return [int(r) for r in found.group(1).split(",") if r.strip()] if found else None
    return []


def join_probe(probe_group: Any, timeout_s: float) -> None:
    """A rank other than 0, after a collective timed out: arrive at rank 0's probe
    (`missing_ranks`), so it names only the ranks that did not. Never raises."""
    timeout = datetime.timedelta(seconds=min(timeout_s, PROBE_MAX_S))
    try:
        dist.monitored_barrier(group=probe_group, timeout=timeout, wait_all_ranks=True)
    except RuntimeError:  # rank 0 gone or itself stuck: its launcher reports it
        pass


def destroy_world(world: World) -> None:
    if world.is_distributed and dist.is_initialized():
        dist.destroy_process_group()
