"""Exact resume with two learner ranks under the local launcher: the driver (rank 0) killed
with SIGKILL right after step 3's sharded state is saved, then the same command rerun, gives
an uninterrupted run's metrics and final weights; and the rank it left behind leaves by itself
(a rank outliving its driver would hold its port, threads and memory on a shared node).
tests/test_resume.py does the same with one process."""

from __future__ import annotations

import os
import subprocess
import time

import pytest

from tests.kill_and_resume import kill_after_step, metrics, same_final_weights, tiny_cmd

RANKS = ("distributed.num_learners_per_node=[2]", "distributed.collective_timeout_s=60",
         "model.num_threads=1")


def _rank_pids(out) -> list[int]:
    """Processes of learner ranks started for the run in `out` (their command names its
    ranks/config.yaml)."""
    found = subprocess.run(["pgrep", "-f", f"{out}/ranks/config.yaml"], capture_output=True,
                           text=True).stdout.split()
    return [int(pid) for pid in found]


@pytest.mark.slow
def test_two_ranks_killed_after_step_3_resume_exactly(tmp_path):
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    straight, killed = tmp_path / "straight", tmp_path / "killed"
    subprocess.run(tiny_cmd(straight, 96, *RANKS), check=True, env=env, capture_output=True)
    kill_after_step(tiny_cmd(killed, 96, *RANKS), killed, 3, env, timeout_s=300)
    deadline = time.monotonic() + 90  # a rank notices at its next collective, or its heartbeat
    while _rank_pids(killed) and time.monotonic() < deadline:
        time.sleep(0.5)
    assert not _rank_pids(killed), "a learner rank outlived its killed driver"
    subprocess.run(tiny_cmd(killed, 96, *RANKS), check=True, env=env, capture_output=True)
    expected, resumed = metrics(straight), metrics(killed)
    assert [r["training_step"] for r in resumed] == [0, 1, 2, 3, 4, 5, 6]  # no gap, no repeat
    assert resumed[4:] == expected[4:]
    assert same_final_weights(straight, killed)
