"""No collective waits for ever, and its expiry names the peer that did not answer (issue 53,
item 3). Two ranks in spawned processes over gloo with a 2-second timeout; rank 1 never comes
to the collective. Rank 0 fails within the timeout plus the probe's few seconds, with one line
naming rank 1 (and its host, where the ranks know it): torch's own error says only "Timed out
waiting 2000ms for recv operation"."""

from __future__ import annotations

import datetime
import multiprocessing
import socket
import time
from dataclasses import dataclass

import pytest
import torch
import torch.distributed as dist

from rlvr.distributed.ranks import _ERROR_GRACE_S, RankEnv, RankFailure, RankGroup, follow
from rlvr.distributed.world import CollectiveTimeout, is_timeout, missing_ranks

TIMEOUT_S = 2.0
# The timeout, the probe (at most the timeout here) and the spawned processes' imports.
WITHIN_S = 2 * TIMEOUT_S + 6


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _all_reduce_without_rank_1(rank: int, port: int, results) -> None:
    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank,
                            world_size=2, timeout=datetime.timedelta(seconds=TIMEOUT_S))
    probe = dist.new_group(backend="gloo", timeout=datetime.timedelta(seconds=TIMEOUT_S))
    if rank == 1:  # never comes to the all-reduce, nor to the probe
        time.sleep(3 * WITHIN_S)
        return
    start = time.monotonic()
    try:
        dist.all_reduce(torch.ones(4))
        results.put(("no error", time.monotonic() - start))
    except RuntimeError as e:
        assert is_timeout(e), e
        error = CollectiveTimeout("the all-reduce", TIMEOUT_S, missing_ranks(probe, TIMEOUT_S),
                                  ["host-a", "host-b"])
        results.put((str(error), time.monotonic() - start))


def _spawn(target, args_per_rank: list[tuple]) -> list:
    ctx = multiprocessing.get_context("spawn")
    procs = [ctx.Process(target=target, args=args, daemon=True) for args in args_per_rank]
    for p in procs:
        p.start()
    return procs


def _ranks_0_and_1(target) -> tuple[str, float]:
    """`target(rank, port, results)` in two processes; the first (message, seconds) reported."""
    results = multiprocessing.get_context("spawn").Queue()
    port = _free_port()
    return _result(results, _spawn(target, [(r, port, results) for r in range(2)]))


def _result(results, procs) -> tuple[str, float]:
    try:
        return results.get(timeout=WITHIN_S + 60)  # the children's start is not timed
    finally:
        for p in procs:
            p.kill()
            p.join(10)


@pytest.mark.timeout(120)
def test_an_all_reduce_a_rank_never_joins_fails_in_time_naming_that_rank():
    message, seconds = _ranks_0_and_1(_all_reduce_without_rank_1)
    assert message == ("the all-reduce timed out after 2 s (distributed.collective_timeout_s): "
                       "rank 1 on host-b did not answer")
    assert seconds < WITHIN_S
    print(f"detected in {seconds:.1f} s")


# ---- the learner ranks' calls (rlvr.distributed.ranks), as launchers start them ----

@dataclass(frozen=True)
class _Spec:
    device: str = "cpu"
    timeout_s: float = TIMEOUT_S


class HangingWorker:
    """A worker whose `work` hangs on rank 1 (a rank stuck in a kernel, or stopped)."""

    def __init__(self, spec, rank: int, world_size: int):
        self.rank, self.world = rank, None

    def work(self) -> int:
        if self.rank == 1:
            time.sleep(3 * WITHIN_S)
        return self.rank

    def shutdown(self) -> None:
        pass


def _rank_0_call(port: int, results) -> None:
    env = RankEnv(rank=0, world_size=2, local_rank=0, master_addr="127.0.0.1", master_port=port)
    group = RankGroup(_Spec(), env, HangingWorker)
    start = time.monotonic()
    try:
        group.call("work", [(), ()])
        results.put(("no error", time.monotonic() - start))
    except RankFailure as e:
        results.put((str(e), time.monotonic() - start))


def _rank_1_follows(port: int, results) -> None:
    env = RankEnv(rank=1, world_size=2, local_rank=1, master_addr="127.0.0.1", master_port=port)
    follow("cpu", TIMEOUT_S, env, exit_process=lambda code: None)


@pytest.mark.timeout(120)
def test_a_learner_rank_that_hangs_in_a_call_is_named_on_the_first_line():
    results = multiprocessing.get_context("spawn").Queue()
    port = _free_port()
    procs = _spawn(_rank_0_call, [(port, results)]) + _spawn(_rank_1_follows, [(port, results)])
    message, seconds = _result(results, procs)
    first = message.splitlines()[0]
    assert first == ("the learner ranks' call 'work' timed out after 2 s (distributed.collective_"
                     f"timeout_s): rank 1 on {socket.gethostname()} did not answer"), message
    assert seconds < WITHIN_S + _ERROR_GRACE_S  # rank 0 also waits for the ranks' reports
    print(f"detected in {seconds:.1f} s")


# ---- the GPU-per-rank check's own group (GPU only; its gloo group tested here on CPU) ----

def _gpu_check_without_rank_1(rank: int, port: int, results) -> None:
    import rlvr.device as device_module

    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank,
                            world_size=2, timeout=datetime.timedelta(seconds=TIMEOUT_S))
    if rank == 1:  # never comes to the check
        time.sleep(3 * WITHIN_S)
        return
    device_module.gpu_identity = lambda device: "host-a/GPU-0"  # no GPU here
    start = time.monotonic()
    try:
        device_module.check_one_gpu_per_rank(None, 2, timeout_s=TIMEOUT_S)
        results.put(("no error", time.monotonic() - start))
    except RuntimeError as e:
        results.put((f"timeout: {is_timeout(e)}", time.monotonic() - start))


@pytest.mark.timeout(120)
def test_the_gpu_per_rank_checks_group_takes_the_collective_timeout():
    """Its gloo group took torch's default for a new group (30 minutes), not the world's."""
    message, seconds = _ranks_0_and_1(_gpu_check_without_rank_1)
    assert message == "timeout: True" and seconds < WITHIN_S, (message, seconds)
