"""A learner rank lost in the middle of a run (killed, raised, hung) ends the run with its own
documented code (8) and one line naming the rank and the last state, not a traceback (exit 1,
"a bug in rlvr"); the MFU of several ranks counts every rank's device."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from rlvr.config import load_config
from rlvr.distributed.learner_group import combine_results
from rlvr.learner import UpdateResult
from rlvr.metrics.throughput import ModelShape, learner_throughput

TINY = ["configs/tiny.yaml", "algorithm.filter_zero_std_samples=false", "eval.local_eval_every=0",
        "logging.progress_bar=false", "checkpoint.save_freq=0", "model.num_threads=1",
        "distributed.num_learners_per_node=[2]", "distributed.collective_timeout_s=60",
        "experiment.total_episodes=96", "rollout.response_length=48"]


def _other_ranks(out: Path) -> list[str]:
    return subprocess.run(["pgrep", "-f", f"{out}/ranks/config.yaml"], capture_output=True,
                          text=True).stdout.split()


@pytest.mark.timeout(300)
def test_a_killed_learner_rank_ends_the_run_with_exit_8_in_one_line(tmp_path):
    out, err = tmp_path / "run", tmp_path / "err"
    with open(err, "w") as stderr:
        proc = subprocess.Popen([sys.executable, "-m", "rlvr.cli", "train", *TINY,
                                 f"experiment.output_dir={out}",
                                 "checkpoint.checkpoint_state_freq=1"],
                                stdout=subprocess.DEVNULL, stderr=stderr)
        metrics = out / "metrics.jsonl"
        deadline = time.monotonic() + 200
        while not (metrics.exists() and len(metrics.read_text().splitlines()) >= 3):
            assert proc.poll() is None and time.monotonic() < deadline
            time.sleep(0.05)
        os.kill(int(_other_ranks(out)[0]), signal.SIGKILL)
        code = proc.wait(timeout=150)
    last = err.read_text().strip().splitlines()[-1]
    assert code == 8, last
    assert last.startswith("rlvr: ") and "learner rank(s) 1" in last
    assert "resume from the last training state" in last and "step_00000" in last


def test_learner_mfu_counts_every_ranks_peak():
    """Every rank's tokens over one device's peak: the MFU grew with the number of ranks."""
    shape = ModelShape(num_params=1_000_000, num_layers=2, hidden_size=64)
    one = UpdateResult(loss_sums={}, num_response_tokens=500, num_tokens=1000, num_sequences=10,
                       entropy_sum=0, engine_diff_sum=0, engine_diff_max=0, grad_norm=1,
                       learning_rate=1e-3, skipped_steps=0, seconds=1.0)
    alone = learner_throughput(load_config("configs/tiny.yaml"), shape, one, 1e12)
    two = load_config("configs/tiny.yaml", ["distributed.num_learners_per_node=[2]"])
    both = learner_throughput(two, shape, combine_results([one, one], 1.0), 1e12)
    assert both["learner_mfu"] == pytest.approx(alone["learner_mfu"])
    assert both["learner_tokens_per_second_step"] == 2 * alone["learner_tokens_per_second_step"]


@pytest.mark.timeout(200)
def test_sigterm_while_starting_leaves_no_learner_rank_behind(tmp_path):
    """Before the trainer took SIGTERM over, its default killed rank 0 outright: the other ranks,
    in sessions of their own, waited out their rendezvous (about 17 minutes by default)."""
    out = tmp_path / "run"
    proc = subprocess.Popen([sys.executable, "-m", "rlvr.cli", "train", *TINY,
                             f"experiment.output_dir={out}"],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline = time.monotonic() + 120
    while not (out / "ranks" / "rank_1.log").exists():
        assert proc.poll() is None and time.monotonic() < deadline
        time.sleep(0.01)
    time.sleep(0.5)  # rank 0 loads the model: its rendezvous store is not up yet
    proc.send_signal(signal.SIGTERM)
    assert proc.wait(timeout=90) == 128 + signal.SIGTERM
    time.sleep(2)
    left = _other_ranks(out)
    for pid in left:
        os.kill(int(pid), signal.SIGKILL)
    assert not left, f"learner rank(s) {left} outlived the launcher"
