"""New weights into running inference servers, without restarting them: through the disk, or
broadcast over a process group.

Both follow the same order on every server, so a request never runs on half-loaded weights:
pause scheduling, load, label the new version, drop prefix caches computed with the old
weights, resume. `keep` pauses (in-flight updates) freeze running requests, which continue on
the new weights after the resume, their tokens labelled by version (a sample's staleness is its
oldest token's); `wait` pauses let them finish on the old weights first.

- `DiskUpdate`: the trainer writes the weights as safetensors into a fresh directory
  `<dir>/v<N>` (built under a temporary name and renamed, so a server never sees a partial
  file: NOTES.md records that a reload from a bad path kills a server), every server
  reloads from it, and the directory is removed once all have confirmed. It needs a filesystem
  that the trainer and every server reach (a cluster's shared disk).
- `BroadcastUpdate`: the trainer is rank 0 of a torch.distributed group whose other ranks are
  the servers' workers (gloo here, NCCL on GPUs), joined through rlvr's worker extension
  (the serving engine's receiver, in its subpackage: the same receive loop engine actors use);
  each push streams the weights in buckets (`rlvr.rollout.weight_sync.broadcast`). The group's
  store listens on `weight_sync_host` only, and its plan is signed with the run's key, which
  the servers' workers check before they join.

Servers load only what is under their run's weights directory (`rlvr.serving.guard`), so
`DiskUpdate`'s directory must be the one the servers were started with
(`<output_dir>/weight_updates`).

A server whose update fails is reported back by address so the caller can stop sending it
requests: a server that missed an update must not keep serving an old version silently.
Not here: which servers exist and which are alive (`rlvr.rollout.remote.engine`).
"""

from __future__ import annotations

import logging
import shutil
import threading
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Callable, Iterable, Sequence

import torch

from rlvr.checkpoint.atomic import fresh_tmp_dir, publish_dir
from rlvr.device import HOST, collective_backend
from rlvr.models import DTYPES
from rlvr.rollout.weight_sync.tied import with_tied_head
from rlvr.rollout.weight_sync.broadcast import BroadcastTransport, bound_socket, layout_of
from rlvr.serving.client import ServerClient, ServerError

log = logging.getLogger(__name__)

NamedTensors = Iterable[tuple[str, torch.Tensor]]
WEIGHTS_FILE = "model.safetensors"


def write_weights_dir(named_tensors: NamedTensors, target: Path, tied_embeddings: bool,
                      dtype: torch.dtype | None = None) -> Path:
    """The weights as one safetensors file in a new directory `target`, published atomically,
    floating-point ones in `dtype` (the servers' own, `servers_weight_dtype`; None: as they
    are): a bf16 server loads the same values from half the bytes. Tied embeddings: the
    serving engine keeps its own head, which a reload of the embedding alone leaves stale, so
    the head goes in as a copy of the embedding (`with_tied_head`)."""
    from safetensors.torch import save_file

    weights = with_tied_head(named_tensors) if tied_embeddings else named_tensors
    tensors: dict[str, torch.Tensor] = {}
    seen: set[int] = set()
    for name, tensor in weights:
        t = tensor.detach().contiguous()
        if dtype is not None and t.is_floating_point():
            t = t.to(dtype)
        if t.device != HOST or t.untyped_storage().data_ptr() in seen:
            t = t.to(HOST, copy=True)  # safetensors refuses shared storage and device memory
        seen.add(t.untyped_storage().data_ptr())
        tensors[name] = t
    tmp = fresh_tmp_dir(target)
    save_file(tensors, str(tmp / WEIGHTS_FILE))
    return publish_dir(tmp, target)


def _each(servers: Sequence[ServerClient], fn: Callable[[ServerClient], object]
          ) -> dict[str, BaseException]:
    """`fn(server)` on every server at once; the failures by address."""
    failures: dict[str, BaseException] = {}
    with ThreadPoolExecutor(max(1, len(servers))) as pool:
        futures = {s.address: pool.submit(fn, s) for s in servers}
    for address, future in futures.items():
        if future.exception() is not None:
            failures[address] = future.exception()
    return failures


def _paused_update(server: ServerClient, mode: str, load: Callable[[ServerClient], None],
                   version: int) -> None:
    server.pause(mode)
    try:
        load(server)
        server.set_version(version)
        server.reset_prefix_cache()
    finally:
        server.resume()  # a failed load still must not leave requests frozen forever


class DiskUpdate:
    """Weights through `<directory>/v<N>`, in the servers' dtype when they all report one."""

    def __init__(self, directory: Path, tied_embeddings: bool, pause_mode: str = "wait",
                 timeout_s: float = 60.0):
        self.directory = Path(directory)
        self.tied_embeddings, self.pause_mode = tied_embeddings, pause_mode
        self.timeout_s = timeout_s
        self._dtype: tuple[tuple[str, ...], torch.dtype | None] | None = None  # per server set

    def push(self, servers: Sequence[ServerClient], named_tensors: NamedTensors,
             version: int) -> dict[str, BaseException]:
        """Write, have every server load, remove; the servers that failed, by address."""
        members = tuple(s.address for s in servers)
        if self._dtype is None or self._dtype[0] != members:  # asked again when one is dropped
            self._dtype = (members, servers_weight_dtype(servers, self.timeout_s))
        target = write_weights_dir(named_tensors, self.directory / f"v{version}",
                                   self.tied_embeddings, self._dtype[1])
        if not (target / WEIGHTS_FILE).stat().st_size:
            raise RuntimeError(f"{target / WEIGHTS_FILE} is empty; no server was asked to load it")
        try:
            return _each(servers, lambda s: _paused_update(
                s, self.pause_mode, lambda c: c.reload_weights(str(target.resolve())), version))
        finally:
            shutil.rmtree(target, ignore_errors=True)


def servers_weight_dtype(servers: Sequence[ServerClient], timeout_s: float) -> torch.dtype | None:
    """The dtype every server's workers hold their weights in (`weight_dtype` of rlvr's
    worker extension), to send floating-point weights in; None (each server then casts what it
    loads) when they differ, name one rlvr does not send, or one cannot say (a server without
    the extension, which disk updates do not need, or one that is down: the update finds it)."""
    names: set[str] = set()
    for server in servers:
        try:
            names.update(server.collective_rpc("weight_dtype", timeout_s=timeout_s))
        except ServerError:
            return None
    return DTYPES.get(names.pop()) if len(names) == 1 else None


class BroadcastUpdate:
    """Weights over a process group: this process is rank 0, each server's workers follow.
    The group forms at the first push (the layout comes from its weights); `host` must be an
    address of this machine that every server can reach (the group's store listens there
    only). `key`: the run's server key, which signs the group's plan (servers started by rlvr
    refuse an unsigned one)."""

    def __init__(self, host: str, tensor_parallel_size: int, bucket_bytes: int,
                 timeout_s: float, device: torch.device | None = None, pause_mode: str = "wait",
                 key: str | None = None):
        self.host, self.tp, self._key = host, tensor_parallel_size, key
        self.bucket_bytes, self.timeout_s = bucket_bytes, timeout_s
        # NCCL between GPUs (the sender's buffer on its device), gloo through host memory.
        self.device = device
        self.backend = collective_backend((device or HOST).type)
        self.pause_mode = pause_mode
        self._transport: BroadcastTransport | None = None
        self._members: tuple[str, ...] = ()

    def push(self, servers: Sequence[ServerClient], named_tensors: NamedTensors,
             version: int) -> dict[str, BaseException]:
        weights = list(named_tensors)  # views of the learner's tensors: the layout needs them all
        members = tuple(s.address for s in servers)
        if self._transport is None:
            self._connect(servers, weights)
        elif members != self._members:
            # A server left the group: its rank would never receive, and every broadcast would
            # time out. Re-forming a smaller group needs the workers to leave theirs first,
            # which the serving engine offers no call for; the run stops with the addresses
            # instead.
            gone = sorted(set(self._members) - set(members))
            raise RuntimeError(f"broadcast weight updates cannot continue without {gone}: the "
                               "group's ranks are fixed; use rollout.weight_update=disk to "
                               "carry on with fewer servers")
        failures: dict[str, BaseException] = {}

        def receive(server: ServerClient) -> None:
            got = server.collective_rpc("receive_weights", args=[version],
                                        timeout_s=self.timeout_s)
            if any(int(v) != version for v in got):
                raise ServerError(server.address, f"workers loaded versions {got}, not {version}")

        for s in servers:
            s.pause(self.pause_mode)
        try:
            with ThreadPoolExecutor(len(servers)) as pool:
                futures = {s.address: pool.submit(receive, s) for s in servers}
                self._transport.push(weights, version)  # type: ignore[union-attr]
            for address, future in futures.items():
                if future.exception() is not None:
                    failures[address] = future.exception()
            for s in servers:
                if s.address not in failures:
                    s.set_version(version)
                    s.reset_prefix_cache()
        finally:
            for s in servers:
                try:
                    s.resume()
                except ServerError as e:
                    failures.setdefault(s.address, e)
        return failures

    def _connect(self, servers: Sequence[ServerClient], weights: list) -> None:
        world_size = 1 + self.tp * len(servers)
        layout = layout_of(weights)
        wire_dtype = servers_weight_dtype(servers, self.timeout_s)
        listen = bound_socket(self.host)  # the port is known before the rendezvous blocks
        port = listen.getsockname()[1]

        def join(indexed: tuple[int, ServerClient]) -> list:
            i, server = indexed
            return server.collective_rpc(
                "init_weight_group", args=[self.host, port, 1 + i * self.tp, world_size],
                kwargs={"backend": self.backend, "timeout_s": self.timeout_s},
                timeout_s=self.timeout_s)

        with ThreadPoolExecutor(len(servers)) as pool:
            joins = [pool.submit(join, (i, s)) for i, s in enumerate(servers)]
            # Blocks until every worker has joined (the rendezvous), or times out.
            self._transport = BroadcastTransport(self.host, port, world_size - 1, layout,
                                                 self.timeout_s, bucket_bytes=self.bucket_bytes,
                                                 backend=self.backend, device=self.device,
                                                 wire_dtype=wire_dtype, token=self._key,
                                                 listen=listen)
            ranks = [r for j in joins for r in j.result()]
        self._members = tuple(s.address for s in servers)
        log.info("weight broadcast group formed: %d server workers (ranks %s) at %s:%d, "
                 "weights sent in %s", len(ranks), ranks, self.host, port,
                 wire_dtype or "the learner's dtypes")

    def close(self, servers: Sequence[ServerClient] = (), wait_s: float = 10.0) -> None:
        """Tell the servers' workers the group is over (they are listening only while asked
        to receive, so each is asked to, and gets the goodbye instead of weights). Bounded: a
        server that is gone would hold the goodbye until the group's timeout, so this waits
        `wait_s` and leaves the rest to a daemon thread."""
        transport, self._transport = self._transport, None
        if transport is None:
            return

        def goodbye() -> None:
            with ThreadPoolExecutor(max(1, len(servers))) as pool:
                for s in servers:
                    pool.submit(s.collective_rpc, "receive_weights", timeout_s=self.timeout_s)
                transport.close()

        worker = threading.Thread(target=goodbye, name="rlvr-weights-goodbye", daemon=True)
        worker.start()
        worker.join(wait_s)
