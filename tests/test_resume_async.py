"""Exact resume of an asynchronous run (rollout.async_steps=1): a run killed with SIGKILL after
step 3 and rerun repeats the uninterrupted run's steps. The batch generated ahead of step 4
(with the weights of step 2) is in the state of step 3 with its policy versions, and the mixer's
state is the one from before the batch not yet made; before, the resumed run drew step 4's
prompts again from a mixer that was already past them, and made them with newer weights."""

import json
import os
import signal
import subprocess
import sys
import time

import pytest
import torch
from safetensors.torch import load_file

from rlvr.checkpoint.state import load_latest_state

TIMING = ("time/", "learner_tokens_per_second_step", "learner_mfu", "memory/")


def _cmd(out, episodes=96):
    return [sys.executable, "-m", "rlvr.cli", "train", "configs/tiny.yaml",
            f"experiment.output_dir={out}", f"experiment.total_episodes={episodes}",
            "rollout.response_length=48", "checkpoint.checkpoint_state_freq=1",
            "rollout.async_steps=1", "algorithm.filter_zero_std_samples=false",
            "logging.progress_bar=false", "eval.local_eval_every=0", "checkpoint.save_freq=0"]


def _metrics(out):
    rows = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
    return [{k: v for k, v in r.items() if not k.startswith(TIMING)} for r in rows]


@pytest.mark.slow
@pytest.mark.timeout(600)
def test_sigkill_after_step_3_then_resume_of_an_async_run_is_exact(tmp_path):
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    straight, killed = tmp_path / "straight", tmp_path / "killed"
    subprocess.run(_cmd(straight), check=True, env=env, capture_output=True)
    proc = subprocess.Popen(_cmd(killed), env=env, stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL)
    deadline = time.monotonic() + 300
    while not (killed / "state" / "step_000003").exists() and time.monotonic() < deadline:
        time.sleep(0.01)
    assert proc.poll() is None, "the run ended before it could be killed"
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    assert not (killed / "final").exists()
    state = load_latest_state(killed / "state")
    assert state.step == 3 and state.ahead  # the batch of step 4, made ahead, is in the state
    subprocess.run(_cmd(killed), check=True, env=env, capture_output=True)
    expected, resumed = _metrics(straight), _metrics(killed)
    assert [r["training_step"] for r in resumed] == [0, 1, 2, 3, 4, 5, 6]  # no gap, no repeat
    assert [r["async/num_steps_off_policy"] for r in expected[1:]] == [0.0] + [1.0] * 5
    assert resumed[4:] == expected[4:]
    a = load_file(straight / "final" / "model.safetensors")
    b = load_file(killed / "final" / "model.safetensors")
    assert a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)
