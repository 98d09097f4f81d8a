"""Learner ranks as processes joined by torch.distributed, however they were started: by the
local launcher (`rlvr.launch.local_ranks`), by `torchrun`, or by `srun` (the Slurm launcher).

Who is who comes from the environment torchrun defines: RANK, WORLD_SIZE, LOCAL_RANK,
MASTER_ADDR, MASTER_PORT (`RankEnv`). Every rank runs the same command (`rlvr train CONFIG`).
Rank 0 runs the trainer and drives the ranks as the Ray launcher's driver drives its actors:
`RankGroup.call(method, args_per_rank)` runs a `LearnerWorker` method on every rank (its own
in process) and returns each rank's result, so `LearnerGroup` and the trainer above it do not
know which launcher started the ranks. Every other rank runs `follow`: it joins, then serves
calls until rank 0 says stop or is gone.

How a call travels, all of it torch.distributed (no transport of ours):
- a doorbell in the TCPStore of the rendezvous (key `rlvr/call/<n>`), which a follower polls
  with `store.check`: a blocking store wait would give up after a fixed time while rank 0
  generates for longer (and the libuv store closes the connection when a wait times out), and
  a poll notices at once when rank 0's process, which serves the store, is gone;
- the method's name and arguments scattered, and the results gathered, as objects over a gloo
  group of the ranks (`scatter_object_list`, `gather_object`), which carries the collective
  timeout. The ranks are one job's processes and trust each other as Ray's actors do.

Trust: the store is a plain key-value server that anyone who reaches its port can read and
write, so nothing a rank obeys comes from it. Rank 0's store listens only on MASTER_ADDR
(torch's TCPStore listens on every interface unless handed a socket, `bound_socket`; torchrun's
agent serves its own store). What the ranks run travels over the group, and a follower runs
only the worker class's public methods (`worker_methods`); an unknown name fails on that rank.
The store carries a doorbell and error records, each signed (HMAC-SHA256) with a key rank 0
draws when the ranks join and hands the others over the group, never through the store: a
doorbell someone else rings is ignored (a follower would otherwise enter the scatter early and
time out while rank 0 generates), and an error record someone else writes is named as such
and ignored. Nothing from the store is unpickled. The group's own connections (gloo, NCCL)
are not authenticated: docs/security.md.

Failure: a follower whose call raises writes a signed {host, pid, traceback} into the store and
exits, so its sockets close and its peers' collectives fail at once rather than at the
timeout. Rank 0 then raises `LearnerGroupError` naming every rank that reported, and the ones
that went silent (killed; their launcher reports how: torchrun and srun print it, the local
launcher logs each rank's exit status). A call that runs out of the collective timeout (a rank
hung, stopped, or cut off with its sockets open) is probed first: every rank whose collective
timed out meets at a monitored barrier on a gloo group kept for it
(`rlvr.distributed.world.missing_ranks`), and the report's first line names the ranks that did
not come, with their hosts. Followers ignore SIGINT and SIGTERM (srun and a terminal send them
to every rank): rank 0 decides when to stop, after saving its state with their help.
"""

from __future__ import annotations

import datetime
import hashlib
import hmac
import inspect
import json
import logging
import os
import secrets
import signal
import socket
import sys
import time
import traceback
from dataclasses import dataclass
from typing import Any, Callable, Mapping

import torch.distributed as dist

from rlvr.device import bind, resolve_device
from rlvr.distributed.world import (CollectiveTimeout, World, is_timeout, join_probe,
                                    missing_ranks)
from rlvr.rollout.weight_sync.broadcast import bound_socket

log = logging.getLogger(__name__)

STOP = "__stop__"  # the last call: followers answer it, leave the group and exit
_PREFIX = "rlvr/"  # our keys in the rendezvous store (torchrun's agent keeps its own there)
_ERROR_GRACE_S = 5.0  # after a failed call, how long rank 0 waits for the others' reports
_POLL_MAX_S = 0.05  # the longest pause between two polls of the doorbell
_KEY_BYTES = 32  # the call key's length (HMAC-SHA256)


class RankFailure(RuntimeError):
    """A learner rank failed (raised, died or timed out); the ranks are unusable."""


@dataclass(frozen=True)
class RankEnv:
    """This process's place among the ranks, as torchrun's environment variables give it."""

    rank: int
    world_size: int
    local_rank: int
    master_addr: str
    master_port: int

    @staticmethod
    def from_environ(environ: Mapping[str, str] = os.environ) -> "RankEnv | None":
        """None unless RANK and WORLD_SIZE are set and the world has more than one rank."""
        if "RANK" not in environ or "WORLD_SIZE" not in environ:
            return None
        world_size = int(environ["WORLD_SIZE"])
        if world_size < 2:
            return None
        missing = [k for k in ("MASTER_ADDR", "MASTER_PORT") if not environ.get(k)]
        if missing:
            raise RankFailure(f"RANK and WORLD_SIZE are set but {', '.join(missing)} is not: "
                              "start the ranks with torchrun, srun (rlvr's Slurm launcher) or "
                              "the local launcher")
        return RankEnv(rank=int(environ["RANK"]), world_size=world_size,
                       local_rank=int(environ.get("LOCAL_RANK", "0")),
                       master_addr=environ["MASTER_ADDR"], master_port=int(environ["MASTER_PORT"]))

    def to_environ(self) -> dict[str, str]:
        """The variables torchrun would set for this rank (one node: LOCAL_WORLD_SIZE is the
        world's size)."""
        return {"RANK": str(self.rank), "WORLD_SIZE": str(self.world_size),
                "LOCAL_RANK": str(self.local_rank), "LOCAL_WORLD_SIZE": str(self.world_size),
                "MASTER_ADDR": self.master_addr, "MASTER_PORT": str(self.master_port)}


@dataclass
class _Joined:
    store: dist.Store
    control: Any  # the gloo ProcessGroup the calls travel on
    probe: Any  # a gloo ProcessGroup for naming the ranks missing after a timeout, nothing else
    world: World
    hosts: list[str]  # each rank's host name
    key: bytes  # signs what the store carries: rank 0 drew it, the group carried it


def _join(env: RankEnv, backend: str, timeout_s: float) -> _Joined:
    """The rendezvous store (rank 0 serves it on MASTER_ADDR only, unless torchrun's agent
    already serves one), the default process group on `backend` (NCCL on GPUs, gloo on CPUs),
    a gloo group for the calls, and the call key. Blocks until every rank has joined, or the
    timeout."""
    timeout = datetime.timedelta(seconds=timeout_s)
    agent_store = os.environ.get("TORCHELASTIC_USE_AGENT_STORE", "").lower() == "true"
    is_master = env.rank == 0 and not agent_store
    # Left to itself TCPStore listens on every interface, whatever host it is given; handed a
    # socket bound to MASTER_ADDR, it listens there only (and closes the socket when it ends).
    listen_fd = bound_socket(env.master_addr, env.master_port).detach() if is_master else None
    store = dist.TCPStore(env.master_addr, env.master_port, env.world_size, is_master=is_master,
                          timeout=timeout, wait_for_workers=False, master_listen_fd=listen_fd)
    dist.init_process_group(backend, store=dist.PrefixStore("rlvr-pg", store), rank=env.rank,
                            world_size=env.world_size, timeout=timeout)
    control = dist.new_group(backend="gloo", timeout=timeout)
    probe = dist.new_group(backend="gloo", timeout=timeout)
    hosts: list[Any] = [None] * env.world_size
    dist.all_gather_object(hosts, socket.gethostname(), group=control)
    # Only the group's members take part in a broadcast, so the key never touches the store.
    key: list[Any] = [secrets.token_bytes(_KEY_BYTES) if env.rank == 0 else None]
    dist.broadcast_object_list(key, src=0, group=control)
    return _Joined(store, control, probe, World(env.rank, env.world_size, backend, timeout_s),
                   hosts, key[0])


def worker_methods(worker_cls: type) -> frozenset[str]:
    """The methods rank 0 may have every rank run: the worker class's public functions.
    `shutdown` is left out: only the last call, `STOP`, runs it."""
    return frozenset(name for name, _ in inspect.getmembers(worker_cls, inspect.isfunction)
                     if not name.startswith("_") and name != "shutdown")


def _run(worker: Any, method: str, args: tuple | None, allowed: frozenset[str]) -> Any:
    """`worker.method(*args)`; None for `STOP` or a skipped rank (args None)."""
    if method != STOP and method not in allowed:
        raise RankFailure(f"'{method}' is not a method the learner ranks run (they run "
                          f"{', '.join(sorted(allowed))})")
    return None if args is None or method == STOP else getattr(worker, method)(*args)


def _sign(key: bytes, label: str, body: str = "") -> str:
    """HMAC-SHA256 under the call key over what a store value means (`label`: its key
    without the prefix, so a value moved to another key fails) and its body."""
    return hmac.new(key, f"{label}\n{body}".encode(), hashlib.sha256).hexdigest()


def _worker_device(device: str, local_rank: int):
    resolved = resolve_device(device, local_rank)
    bind(resolved)  # before NCCL creates anything, or every rank would use GPU 0
    return resolved


class RankGroup:
    """Rank 0's handle on every rank: a `LearnerWorker` (or `worker_cls`) here, and one in
    each follower's process. Call `close()` when done."""

    def __init__(self, spec: Any, env: RankEnv, worker_cls: type):
        if env.rank != 0:
            raise ValueError(f"RankGroup drives the ranks from rank 0, not rank {env.rank}")
        device = _worker_device(spec.device, env.local_rank)
        self.env = env
        self._joined = _join(env, device.backend, spec.timeout_s)
        self.hosts = self._joined.hosts
        # What the followers build: the spec rank 0 resolved, and the worker class.
        dist.broadcast_object_list([spec, worker_cls], src=0, group=self._joined.control)
        self._methods = worker_methods(worker_cls)
        self.worker = worker_cls(spec, 0, env.world_size)
        self.worker.world = self._joined.world
        self._calls = 0
        self._failed: str | None = None

    def call(self, method: str, args_per_rank: list[tuple | None]) -> list[Any]:
        """`method(*args)` on every rank's worker (None skips a rank: only for methods that are
        not collectives); each rank's result, in rank order. A failure anywhere raises
        `RankFailure` naming each failed rank, its host and its error; later calls raise it
        too. `method` must be one of `worker_methods(worker_cls)` (ValueError, nothing sent)."""
        if self._failed is not None:
            raise RankFailure(f"the learner ranks failed earlier: {self._failed}")
        if len(args_per_rank) != self.env.world_size:
            raise ValueError(f"{len(args_per_rank)} argument sets for {self.env.world_size} "
                             "ranks")
        if method != STOP and method not in self._methods:
            raise ValueError(f"'{method}' is not a method the learner ranks run (they run "
                             f"{', '.join(sorted(self._methods))})")
        self._calls += 1
        store, control = self._joined.store, self._joined.control
        try:
            ring(store, self._joined.key, self._calls)
            if self._calls > 1:  # the followers have all read the one before
                store.delete_key(f"{_PREFIX}call/{self._calls - 1}")
            # The method's name travels with each follower's arguments, over the group. Rank
            # 0's own arguments and result stay here: the object collectives would pickle them
            # both ways (a full state to load, the full weights gathered).
            mine: list[Any] = [None]
            sent = [None, *((method, args) for args in args_per_rank[1:])]
            dist.scatter_object_list(mine, sent, src=0, group=control)
            result = _run(self.worker, method, args_per_rank[0], self._methods)
            results: list[Any] = [None] * self.env.world_size
            dist.gather_object(None, results, dst=0, group=control)
            results[0] = result
        except Exception as e:
            self._failed = self._failure_report(method, e, self._timed_out(method, e))
            raise RankFailure(self._failed) from e
        except BaseException as e:  # an interrupt: the ranks are mid-call, use them no more
            self._failed = f"interrupted by {type(e).__name__} in '{method}'"
            raise
        return results

    def close(self) -> None:
        """Stop the followers (they answer, leave and exit) and leave the group. After a
        failure, only leave: the followers are gone or stuck, and exit when this process does
        (their launcher stops them)."""
        if self._joined is None:
            return
        if self._failed is None:
            try:
                self.call(STOP, [()] * self.env.world_size)
            except RankFailure as e:
                log.warning("stopping the learner ranks: %s", e)
        self.worker.shutdown()  # destroys the default process group
        self._joined = None

    def _timed_out(self, method: str, error: BaseException) -> CollectiveTimeout | None:
        """After a call ran out of the collective timeout: the ranks that do not reach the
        probe (the others, whose collectives timed out too, come to it); None otherwise."""
        if not is_timeout(error):
            return None
        timeout_s = self._joined.world.timeout_s
        missing = missing_ranks(self._joined.probe, timeout_s)
        return CollectiveTimeout(f"the learner ranks' call '{method}'", timeout_s, missing,
                                 self.hosts)

    def _failure_report(self, method: str, error: BaseException,
                        timed_out: CollectiveTimeout | None = None) -> str:
        """Every rank's error record (a few seconds for them to arrive), then the silent ranks
        and what rank 0 itself saw; first, after a timeout, the ranks that did not answer. A
        record not signed with the call key (someone else wrote it) is ignored and only
        named."""
        reports: dict[int, str] = {}
        unsigned: set[int] = set()
        deadline = time.monotonic() + _ERROR_GRACE_S
        while len(reports) < self.env.world_size - 1 and time.monotonic() < deadline:
            for rank in range(1, self.env.world_size):
                if rank in reports:
                    continue
                try:
                    record = read_error_record(self._joined.store, self._joined.key, rank)
                except ValueError:
                    unsigned.add(rank)
                    continue
                if record is not None:
                    reports[rank] = (f"learner rank {rank} on {record['host']} (pid "
                                     f"{record['pid']}):\n{record['error'].rstrip()}")
            time.sleep(0.1)
        lines = [str(timed_out) if timed_out is not None else
                 f"learner ranks failed in '{method}'", *reports.values()]
        silent = [f"{rank} on {self.hosts[rank]}" for rank in range(1, self.env.world_size)
                  if rank not in reports]
        if silent:
            lines.append(f"learner rank(s) {', '.join(silent)} reported nothing (killed, or "
                         "still waiting on a peer; their launcher's log says how they ended)")
        forged = sorted(unsigned - reports.keys())
        if forged:
            lines.append(f"ignored an error record for learner rank(s) "
                         f"{', '.join(map(str, forged))} that is not signed with the run's call "
                         "key (written by a process other than the ranks)")
        first_line = str(error).splitlines()[0] if str(error) else ""
        lines.append(f"learner rank 0 on {self.hosts[0]} saw: {type(error).__name__}: "
                     f"{first_line}")
        return "\n".join(lines)


def write_error_record(store: dist.Store, key: bytes, rank: int, text: str) -> None:
    """This rank's error record ({host, pid, error}), signed with the call key."""
    label = f"error/{rank}"
    record = json.dumps({"host": socket.gethostname(), "pid": os.getpid(), "error": text})
    store.set(_PREFIX + label, json.dumps({"record": record, "mac": _sign(key, label, record)}))


def read_error_record(store: dist.Store, key: bytes, rank: int) -> dict | None:
    """Rank `rank`'s error record ({host: str, pid: int, error: str}); None while there is
    none or the store is gone. A value there that is not a record signed with `key` for this
    rank raises ValueError: someone other than the ranks wrote it, and it is not believed."""
    label = f"error/{rank}"
    try:
        if not store.check([_PREFIX + label]):
            return None
        raw = store.get(_PREFIX + label)
    except Exception:  # noqa: BLE001  a store torchrun's agent serves may be gone
        return None
    try:
        signed = json.loads(raw)
        record, mac = signed["record"], signed["mac"]
        if not (isinstance(record, str) and isinstance(mac, str)
                and hmac.compare_digest(mac.encode(), _sign(key, label, record).encode())):
            raise ValueError("bad signature")
        fields = json.loads(record)
        host, pid, error = fields["host"], fields["pid"], fields["error"]
    except (ValueError, KeyError, TypeError) as e:
        raise ValueError(f"the store's error record for rank {rank} is not the rank's") from e
    return {"host": str(host), "pid": int(pid), "error": str(error)}


def follow(device: str, timeout_s: float, env: RankEnv,
           exit_process: Callable[[int], None] = os._exit) -> None:
    """Rank `env.rank` (not 0): join, build the worker rank 0 describes, and serve its calls
    until it says stop (returns) or is gone (returns too: the run is over). A call that raises
    reports to rank 0 through the store and ends this process (`exit_process(1)`).
    `device` and `timeout_s` are the config's `model.device` and
    `distributed.collective_timeout_s`: what every rank must agree on before rank 0 can send
    anything."""
    if env.rank == 0:
        raise ValueError("rank 0 trains; only the other ranks follow")
    for sig in (signal.SIGINT, signal.SIGTERM):  # rank 0 decides when the run stops
        signal.signal(sig, signal.SIG_IGN)
    resolved = _worker_device(device, env.local_rank)
    joined = _join(env, resolved.backend, timeout_s)
    box: list[Any] = [None, None]
    dist.broadcast_object_list(box, src=0, group=joined.control)
    spec, worker_cls = box
    allowed = worker_methods(worker_cls)
    worker = worker_cls(spec, env.rank, env.world_size)
    worker.world = joined.world
    calls = 0
    while True:
        calls += 1
        if not wait_for_call(joined.store, joined.key, calls):
            log.warning("learner rank %d: rank 0 is gone; exiting", env.rank)
            return
        mine: list[Any] = [None]
        method = f"call {calls}"  # what a report names until rank 0's own word arrives
        try:
            dist.scatter_object_list(mine, None, src=0, group=joined.control)
            method, args = mine[0]
            result = _run(worker, method, args, allowed)
            dist.gather_object(result, None, dst=0, group=joined.control)
        except BaseException as e:  # noqa: BLE001  reported to rank 0, then this rank ends
            if is_timeout(e):  # rank 0 probes who is missing: this rank is not
                join_probe(joined.probe, timeout_s)
            _report_and_exit(joined.store, joined.key, env.rank, method, exit_process)
            return
        if method == STOP:
            worker.shutdown()
            return


def ring(store: dist.Store, key: bytes, number: int) -> None:
    """Rank 0's doorbell for call `number`, signed with the call key: it says only that a
    call has begun (the method and arguments follow over the group)."""
    label = f"call/{number}"
    store.set(_PREFIX + label, _sign(key, label))


def wait_for_call(store: dist.Store, key: bytes, number: int) -> bool:
    """True once rank 0 rings for call `number` (a doorbell signed with `key`); False when the
    store is gone (so is rank 0). Polls, pausing up to `_POLL_MAX_S` (no call waits longer
    than that to start). A value someone else wrote there is logged once and waited past:
    rank 0's own ring overwrites it."""
    label, pause, warned = f"call/{number}", 0.001, False
    expected = _sign(key, label).encode()
    while True:
        try:
            if store.check([_PREFIX + label]):
                if hmac.compare_digest(store.get(_PREFIX + label), expected):
                    return True
                if not warned:
                    log.warning("the store's doorbell for call %d is not signed with the run's "
                                "call key (someone other than rank 0 wrote it); ignored",
                                number)
                    warned = True
        except Exception:  # noqa: BLE001  DistNetworkError and kin: the server is gone
            return False
        time.sleep(pause)
        pause = min(pause * 2, _POLL_MAX_S)


def _report_and_exit(store: dist.Store, key: bytes, rank: int, method: str,
                     exit_process: Callable[[int], None]) -> None:
    text = traceback.format_exc()
    print(f"rlvr: learner rank {rank} failed in '{method}':\n{text}", file=sys.stderr,
          flush=True)
    try:
        write_error_record(store, key, rank, text)
    except Exception:  # noqa: BLE001  rank 0 is gone too: nobody to tell
        pass
    exit_process(1)

