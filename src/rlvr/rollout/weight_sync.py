"""Moving the learner's weights into engines after an update, without restarting them.

An engine in the learner's process takes the weights directly (`engine.update_weights`, a
tensor copy). Engines in other processes (a Ray actor, another node) are reached through
`BroadcastTransport`: the learner is rank 0 of a torch.distributed group of its own (gloo on
CPU, NCCL on GPU) and broadcasts the weights; each engine process runs a `BroadcastReceiver`
that loads what arrives.

Why a separate group and not the learners' default one: engines are not learners, and the
learners' group must keep its own membership (FSDP collectives). Why one flat buffer per dtype:
one broadcast per push instead of one per tensor, a large difference for many small tensors.
Both sides agree on the tensor layout (names, shapes, dtypes) once, at connection time, through
the rendezvous store, so each push carries only the version and the numbers.
"""

from __future__ import annotations

import math
import pickle
from datetime import timedelta
from typing import Iterable

import torch
import torch.distributed as dist

from rlvr.rollout.base import RolloutEngine

Layout = list[tuple[str, tuple[int, ...], torch.dtype]]


def layout_of(named_tensors: Iterable[tuple[str, torch.Tensor]]) -> Layout:
    """Names, shapes and dtypes: all a sender needs to agree on with its receivers."""
    return [(name, tuple(t.shape), t.dtype) for name, t in named_tensors]


def _group(host: str, port: int, rank: int, world_size: int, timeout_s: float,
           backend: str) -> tuple[dist.TCPStore, dist.ProcessGroup]:
    timeout = timedelta(seconds=timeout_s)
    store = dist.TCPStore(host, port, world_size, is_master=rank == 0, timeout=timeout)
    if backend != "gloo":
        raise ValueError(f"weight-sync backend {backend!r}: only gloo is wired here "
                         "(NCCL needs GPUs; it plugs in at this line)")
    return store, dist.ProcessGroupGloo(store, rank, world_size, timeout)


def _flatten(tensors: list[torch.Tensor]) -> dict[torch.dtype, torch.Tensor]:
    by_dtype: dict[torch.dtype, list[torch.Tensor]] = {}
    for t in tensors:
        by_dtype.setdefault(t.dtype, []).append(t.detach().reshape(-1))
    return {dtype: torch.cat(parts) for dtype, parts in by_dtype.items()}


def _unflatten(buffers: dict[torch.dtype, torch.Tensor],
               layout: Layout) -> list[tuple[str, torch.Tensor]]:
    offsets = {dtype: 0 for dtype in buffers}
    out = []
    for name, shape, dtype in layout:
        n = math.prod(shape)
        out.append((name, buffers[dtype][offsets[dtype]:offsets[dtype] + n].view(shape)))
        offsets[dtype] += n
    return out


class BroadcastTransport:
    """The learner's side: rank 0 of a group with `num_engines` receivers; `layout`
    (`layout_of(model.state_dict().items())`) is what every push will carry.

    Construction blocks until every receiver has joined (the rendezvous), so start the
    receivers first or concurrently. `timeout_s` bounds every broadcast: a dead engine makes
    `push` raise instead of hanging the learner.
    """

    def __init__(self, host: str, port: int, num_engines: int, layout: Layout,
                 timeout_s: float = 300.0, backend: str = "gloo"):
        self.layout = list(layout)
        self.store, self.group = _group(host, port, 0, num_engines + 1, timeout_s, backend)
        self.store.set("rlvr/weights/layout", pickle.dumps(self.layout))

    def push(self, named_tensors: Iterable[tuple[str, torch.Tensor]], version: int) -> None:
        named = list(named_tensors)
        names = [n for n, _ in named]
        if names != [n for n, _, _ in self.layout]:
            raise ValueError("the weights pushed do not match the layout agreed at connection")
        self.group.broadcast(torch.tensor([version], dtype=torch.long), 0).wait()
        for buffer in _flatten([t for _, t in named]).values():
            self.group.broadcast(buffer.contiguous(), 0).wait()

    def close(self) -> None:
        # A negative version tells receivers to stop listening.
        try:
            self.group.broadcast(torch.tensor([-1], dtype=torch.long), 0).wait()
        except Exception:  # noqa: BLE001  receivers that are already gone need no goodbye
            pass


class BroadcastReceiver:
    """An engine process's side: `receive_into(engine)` waits for one push and loads it."""

    def __init__(self, host: str, port: int, rank: int, num_engines: int,
                 timeout_s: float = 300.0, backend: str = "gloo"):
        self.store, self.group = _group(host, port, rank, num_engines + 1, timeout_s, backend)
        self.layout: Layout = pickle.loads(self.store.get("rlvr/weights/layout"))
        sizes: dict[torch.dtype, int] = {}
        for _, shape, dtype in self.layout:
            sizes[dtype] = sizes.get(dtype, 0) + math.prod(shape)
        self.buffers = {dtype: torch.empty(n, dtype=dtype) for dtype, n in sizes.items()}

    def receive(self) -> tuple[int, list[tuple[str, torch.Tensor]]] | None:
        """The next push's version and weights (views into reused buffers); None at close."""
        version = torch.zeros(1, dtype=torch.long)
        self.group.broadcast(version, 0).wait()
        if int(version) < 0:
            return None
        for buffer in self.buffers.values():  # dict order = the sender's first-seen dtype order
            self.group.broadcast(buffer, 0).wait()
        return int(version), _unflatten(self.buffers, self.layout)

    def receive_into(self, engine: RolloutEngine) -> int | None:
        got = self.receive()
        if got is None:
            return None
        version, weights = got
        engine.update_weights(weights, version)
        return version
