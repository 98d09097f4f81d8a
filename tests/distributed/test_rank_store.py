"""The learner ranks' rendezvous store as a trust boundary (`rlvr.distributed.ranks`): rank 0's
store listens on MASTER_ADDR only, and a stranger who reaches it can neither choose the method
the ranks run, nor stop them, nor put words in a rank's error report.

The first tests use an in-memory store (`HashStore`) for the doorbell and the error records.
The others join two real ranks as the local launcher wires them (MASTER_ADDR=127.0.0.1): rank
0 in this process, rank 1 in a spawned one running `follow`. They start torch processes:
`component` tests, left out of `make test-fast`."""

from __future__ import annotations

import datetime
import json
import multiprocessing
import os
import signal
import socket
import threading
import time
from dataclasses import dataclass

import pytest
import torch.distributed as dist

from rlvr.distributed.learner_worker import LearnerWorker
from rlvr.distributed.ranks import (STOP, RankEnv, RankFailure, RankGroup, _run, follow,
                                    read_error_record, ring, wait_for_call, worker_methods,
                                    write_error_record)
from rlvr.serving.server import free_port
from tests.rollout.rogue import other_interface_address

KEY = b"k" * 32  # the run's call key, as rank 0 would draw it
TIMEOUT_S = 60.0  # rank 1's process must start (import torch) within it


@dataclass
class Spec:
    device: str = "cpu"
    timeout_s: float = TIMEOUT_S


class Worker:
    """A worker with two public methods, a private one and one that kills its own rank."""

    def __init__(self, spec: Spec, rank: int, world_size: int):
        self.rank = rank

    def add(self, x: int) -> tuple[str, int, int]:
        return ("add", self.rank, x + 1)

    def mul(self, x: int) -> tuple[str, int, int]:
        return ("mul", self.rank, x * 100)

    def die(self) -> None:
        if self.rank == 1:
            os.kill(os.getpid(), signal.SIGKILL)

    def _secret(self) -> str:
        return "private"

    def shutdown(self) -> None:
        if dist.is_initialized():
            dist.destroy_process_group()


# ---- the doorbell, the error records and the allowlist, on an in-memory store -----------------

def test_a_doorbell_not_signed_with_the_runs_key_is_waited_past():
    store = dist.HashStore()
    store.set("rlvr/call/1", "mul")  # the old doorbell: a method's name
    ring(store, b"s" * 32, 1)  # a stranger's signature, under a key of its own
    threading.Timer(0.3, ring, (store, KEY, 1)).start()  # rank 0 rings, overwriting it
    start = time.monotonic()
    assert wait_for_call(store, KEY, 1)
    assert time.monotonic() - start >= 0.25


def test_a_doorbell_for_one_call_does_not_ring_another():
    store = dist.HashStore()
    ring(store, KEY, 1)
    store.set("rlvr/call/2", store.get("rlvr/call/1"))  # replayed under the next number
    threading.Timer(0.3, ring, (store, KEY, 2)).start()
    start = time.monotonic()
    assert wait_for_call(store, KEY, 2)
    assert time.monotonic() - start >= 0.25


def test_only_a_rank_signed_error_record_is_believed():
    store = dist.HashStore()
    assert read_error_record(store, KEY, 1) is None  # nothing reported yet
    write_error_record(store, KEY, 2, "Traceback: the real one")
    record = read_error_record(store, KEY, 2)
    assert record["error"] == "Traceback: the real one" and record["pid"] == os.getpid()
    forgeries = [
        json.dumps({"host": "h", "pid": 1, "error": "FORGED"}),  # the old, unsigned format
        "{}", "[1, 2]", "not json", json.dumps({"record": 3, "mac": "00"}),
        store.get("rlvr/error/2").decode(),  # rank 2's genuine record moved to rank 1
    ]
    for forged in forgeries:
        store.set("rlvr/error/1", forged)
        with pytest.raises(ValueError, match="not the rank's"):
            read_error_record(store, KEY, 1)
    write_error_record(store, b"s" * 32, 1, "FORGED")  # signed, with another key
    with pytest.raises(ValueError, match="not the rank's"):
        read_error_record(store, KEY, 1)


def test_the_ranks_run_only_the_workers_public_methods():
    assert worker_methods(Worker) == {"add", "mul", "die"}
    learner = worker_methods(LearnerWorker)
    assert {"setup", "update_mini_batches", "state_dict"} <= learner
    assert "shutdown" not in learner and not any(name.startswith("_") for name in learner)
    allowed = worker_methods(Worker)
    worker = Worker(Spec(), 1, 2)
    assert _run(worker, "add", (1,), allowed) == ("add", 1, 2)
    assert _run(worker, STOP, (), allowed) is None
    for name in ("_secret", "__init__", "shutdown", "rank", "no_such_method"):
        with pytest.raises(RankFailure, match=f"'{name}' is not a method the learner ranks run"):
            _run(worker, name, (), allowed)


# ---- two real ranks -----------------------------------------------------------------------

def _rank_1(port: int) -> None:
    follow("cpu", TIMEOUT_S, RankEnv(1, 2, 1, "127.0.0.1", port))


class _TwoRanks:
    """Rank 0 (a `RankGroup` here) and rank 1 (a spawned process), as the local launcher
    wires them."""

    def __init__(self):
        self.port = free_port()
        self.rank_1 = multiprocessing.get_context("spawn").Process(target=_rank_1,
                                                                  args=(self.port,))
        self.rank_1.start()
        try:
            self.group = RankGroup(Spec(), RankEnv(0, 2, 0, "127.0.0.1", self.port), Worker)
        except BaseException:
            self.rank_1.kill()
            raise

    def stranger(self) -> dist.TCPStore:
        """A client of rank 0's store, from a process that is not a rank."""
        return dist.TCPStore("127.0.0.1", self.port, 2, is_master=False,
                             timeout=datetime.timedelta(seconds=10))

    def close(self) -> None:
        self.group.close()
        self.rank_1.join(30)
        if self.rank_1.is_alive():
            self.rank_1.kill()


@pytest.fixture
def ranks():
    two = _TwoRanks()
    yield two
    two.close()
    assert two.rank_1.exitcode == 0  # it stopped when rank 0 said so, not before


@pytest.mark.component
@pytest.mark.timeout(120)
def test_the_ranks_store_listens_on_master_addr_only(ranks):
    socket.create_connection(("127.0.0.1", ranks.port), timeout=5).close()  # where it should
    other = other_interface_address()
    if other is None:
        pytest.skip("this host has no interface besides loopback")
    with pytest.raises(OSError):  # refused: the store is not on this interface
        socket.create_connection((other, ranks.port), timeout=5).close()


@pytest.mark.component
@pytest.mark.timeout(120)
def test_a_stranger_at_the_store_cannot_choose_or_stop_the_ranks_calls(ranks):
    """The audit's doorbell attack: a stranger writes the next calls' doorbells (a method's
    name, the stop) and a fake error record; the ranks run what rank 0 says, and go on."""
    stranger = ranks.stranger()
    for number in range(1, 20):
        stranger.set(f"rlvr/call/{number}", "mul" if number % 2 else STOP)
    stranger.set("rlvr/error/1", json.dumps({"host": "h", "pid": 1, "error": "FORGED"}))
    time.sleep(0.5)  # time for rank 1 to read them, were it to believe them
    for x in range(3):
        assert ranks.group.call("add", [(x,), (x,)]) == [("add", 0, x + 1), ("add", 1, x + 1)]
    assert ranks.rank_1.is_alive()


@pytest.mark.component
@pytest.mark.timeout(120)
def test_rank_0_sends_no_method_outside_the_workers_public_ones(ranks):
    for name in ("_secret", "__init__", "shutdown", "no_such_method"):
        with pytest.raises(ValueError, match="not a method the learner ranks run"):
            ranks.group.call(name, [(), ()])
    assert ranks.group.call("mul", [(1,), (2,)]) == [("mul", 0, 100), ("mul", 1, 200)]


@pytest.mark.component
@pytest.mark.timeout(120)
def test_a_strangers_error_record_does_not_speak_for_a_killed_rank():
    two = _TwoRanks()
    try:
        stranger = two.stranger()
        stranger.set("rlvr/error/1", json.dumps({"host": "h", "pid": 1,
                                                 "error": "FORGED: blame the data"}))
        with pytest.raises(RankFailure) as failed:
            two.group.call("die", [(), ()])
    finally:
        two.close()
    message = str(failed.value)
    assert "FORGED" not in message
    assert f"learner rank(s) 1 on {socket.gethostname()} reported nothing" in message
    assert "ignored an error record for learner rank(s) 1 that is not signed" in message
    assert two.rank_1.exitcode == -signal.SIGKILL
