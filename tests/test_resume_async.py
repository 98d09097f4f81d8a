"""Exact resume of an asynchronous run (rollout.async_steps=1): a run killed with SIGKILL after
step 3 and rerun repeats the uninterrupted run's steps. The batch generated ahead of step 4
(with the weights of step 2) is in the state of step 3 with its policy versions, and the mixer's
state is the one from before the batch not yet made; before, the resumed run drew step 4's
prompts again from a mixer that was already past them, and made them with newer weights."""

import os
import subprocess

import pytest

from rlvr.checkpoint.state import load_latest_state
from tests.kill_and_resume import kill_after_step, metrics, same_final_weights, tiny_cmd


def _cmd(out, episodes=96):
    return tiny_cmd(out, episodes, "rollout.async_steps=1")


@pytest.mark.slow
@pytest.mark.timeout(600)
def test_sigkill_after_step_3_then_resume_of_an_async_run_is_exact(tmp_path):
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    straight, killed = tmp_path / "straight", tmp_path / "killed"
    subprocess.run(_cmd(straight), check=True, env=env, capture_output=True)
    kill_after_step(_cmd(killed), killed, 3, env, timeout_s=300)
    state = load_latest_state(killed / "state")
    assert state.step == 3 and state.ahead  # the batch of step 4, made ahead, is in the state
    subprocess.run(_cmd(killed), check=True, env=env, capture_output=True)
    expected, resumed = metrics(straight), metrics(killed)
    assert [r["training_step"] for r in resumed] == [0, 1, 2, 3, 4, 5, 6]  # no gap, no repeat
    assert [r["async/num_steps_off_policy"] for r in expected[1:]] == [0.0] + [1.0] * 5
    assert resumed[4:] == expected[4:]
    assert same_final_weights(straight, killed)
