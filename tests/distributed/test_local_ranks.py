"""Learner ranks without Ray: processes joined by torch.distributed, started by the local
launcher (`rlvr train ... distributed.num_learners_per_node=[2]`), by torchrun, or by hand with
torchrun's environment. Two FSDP2 ranks over gloo give one process's numbers (with
open-instruct's mini-batches too) and the Ray launcher's losses; a rank that raises or is
killed ends the call within seconds, naming its rank, host and error; when rank 0 dies the
others leave.

Each test starts several torch processes: a `component` test, left out of `make test-fast`."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

from rlvr.distributed.ranks import RankEnv
from rlvr.serving.server import free_port

pytestmark = pytest.mark.component

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = Path(__file__).with_name("rank_script.py")
# bf16 off: the in-process Ray run below has the tests' fp32 pin, the subprocesses would not.
TINY = ["configs/tiny.yaml", "algorithm.filter_zero_std_samples=false",
        "eval.local_eval_every=0", "logging.progress_bar=false", "checkpoint.save_freq=0",
        "model.num_threads=1", "model.bf16_autocast=false",
        "distributed.num_learners_per_node=[2]", "distributed.collective_timeout_s=60"]
COMPARED = ("loss/policy_avg", "loss/kl_avg", "optim/grad_norm", "policy/entropy_avg",
            "objective/verifiable_reward", "episode")


def _start_ranks(fault: str = "", world_size: int = 2) -> list[subprocess.Popen]:
    port = free_port()
    procs = []
    for rank in range(world_size):
        env = {**os.environ, **RankEnv(rank, world_size, rank, "127.0.0.1", port).to_environ(),
               "RLVR_TEST_FAULT": fault}
        procs.append(subprocess.Popen([sys.executable, str(SCRIPT)], cwd=ROOT, env=env,
                                      stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                      text=True))
    return procs


def _finish(procs: list[subprocess.Popen], timeout_s: float = 120.0) -> list[tuple[int, str, str]]:
    out = []
    for proc in procs:
        try:
            stdout, stderr = proc.communicate(timeout=timeout_s)
        finally:
            proc.kill()
        out.append((proc.returncode, stdout, stderr))
    return out


def _report(stdout: str) -> dict:
    lines = [line for line in stdout.splitlines() if line.startswith("{")]
    assert lines, stdout
    return json.loads(lines[-1])


@pytest.mark.timeout(300)
def test_two_ranks_without_ray_match_one_process_with_mini_batches():
    (code0, out0, err0), (code1, _, err1) = _finish(_start_ranks())
    assert code0 == 0 and code1 == 0, err0[-3000:] + err1[-3000:]
    report = _report(out0)
    assert report["max_rel_diff"] < 1e-4 and report["weight_diff"] < 1e-5
    assert report["scheduler_steps"] == 4  # 2 updates x 2 mini-batches


@pytest.mark.timeout(300)
def test_a_rank_that_raises_ends_the_call_naming_its_rank_host_and_error():
    (code0, out0, err0), (code1, _, err1) = _finish(_start_ranks("raise"))
    assert code0 == 7, err0[-3000:]
    report = _report(out0)
    assert report["seconds"] < 20  # at once, not after the 30 s collective timeout
    message = report["error"]
    assert f"learner rank 1 on {socket.gethostname()}" in message
    assert "RuntimeError: injected fault in rank 1's update" in message  # its traceback
    assert "learner rank 0" in message
    assert code1 == 1 and "injected fault" in err1  # the rank says it too, and exits


@pytest.mark.timeout(300)
def test_a_rank_that_is_killed_ends_the_call_within_seconds():
    (code0, out0, err0), (code1, _, _) = _finish(_start_ranks("die"))
    assert code0 == 7 and code1 == -9, err0[-3000:]
    report = _report(out0)
    assert report["seconds"] < 20
    assert f"learner rank(s) 1 on {socket.gethostname()} reported nothing" in report["error"]


@pytest.mark.timeout(300)
def test_the_other_ranks_leave_when_rank_0_dies():
    procs = _start_ranks("rank0_dies")
    start = time.monotonic()
    (code0, out0, err0), (code1, _, err1) = _finish(procs)
    assert code0 == 9 and _report(out0)["joined"], err0[-3000:]
    assert code1 == 0 and "rank 0 is gone" in err1
    assert time.monotonic() - start < 90


def _rows(out: Path) -> list[dict]:
    rows = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
    return [r for r in rows if r["training_step"] > 0]


def _assert_same_losses(mine: list[dict], theirs: list[dict]) -> None:
    assert len(mine) == len(theirs) == 3
    for a, b in zip(mine, theirs):
        for key in COMPARED:
            assert a[key] == pytest.approx(b[key], rel=1e-5, abs=1e-7), (key, a, b)


@pytest.mark.slow
@pytest.mark.timeout(600)
def test_local_launcher_ranks_give_the_ray_launchers_losses(tmp_path, ray_session):
    """The brief's check: `rlvr train configs/tiny.yaml distributed.num_learners_per_node=[2]`
    runs 2 ranks under the local launcher, with the Ray launcher's losses (2 learners)."""
    from rlvr.config import load_config
    from rlvr.run.loop import train

    local = tmp_path / "local"
    done = subprocess.run([sys.executable, "-m", "rlvr.cli", "train", *TINY,
                           f"experiment.output_dir={local}"], cwd=ROOT, capture_output=True,
                          text=True, timeout=500)
    assert done.returncode == 0, done.stderr[-3000:]
    assert "learner ranks on hosts: 0:" in done.stderr
    assert (local / "ranks" / "rank_1.log").exists()
    train(load_config(TINY[0], [*TINY[1:], f"experiment.output_dir={tmp_path / 'ray'}",
                                "distributed.launcher=ray"]))
    _assert_same_losses(_rows(local), _rows(tmp_path / "ray"))


@pytest.mark.slow
@pytest.mark.timeout(600)
def test_torchrun_starts_the_same_ranks(tmp_path):
    """`torchrun --nproc-per-node 2 -m rlvr.cli train ...`: every rank runs the same command,
    rank 0 trains (torchrun's agent serves the rendezvous store) and gives the local
    launcher's losses."""
    runs = {}
    for name, launcher in (("torchrun", [sys.executable, "-m", "torch.distributed.run",
                                         "--standalone", "--nproc-per-node", "2"]),
                           ("local", [sys.executable])):
        out = tmp_path / name
        done = subprocess.run([*launcher, "-m", "rlvr.cli", "train", *TINY,
                               f"experiment.output_dir={out}"], cwd=ROOT, capture_output=True,
                              text=True, timeout=500)
        assert done.returncode == 0, done.stderr[-3000:]
        runs[name] = _rows(out)
    assert not (tmp_path / "torchrun" / "ranks").exists()  # torchrun started them, not rlvr
    _assert_same_losses(runs["torchrun"], runs["local"])
