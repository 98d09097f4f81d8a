"""Exact resume: a run killed with SIGKILL after step 3 and rerun matches an uninterrupted one;
a state damaged mid-save is skipped for the one before."""

import os
import signal
import subprocess
import sys
import time

import pytest

from rlvr.checkpoint.state import list_states, load_latest_state
from tests.kill_and_resume import kill_after_step, same_final_weights, tiny_cmd
from tests.kill_and_resume import metrics as _metrics

_cmd = tiny_cmd


@pytest.mark.slow
def test_sigkill_after_step_3_then_resume_is_exact(tmp_path):
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    straight, killed = tmp_path / "straight", tmp_path / "killed"
    subprocess.run(_cmd(straight), check=True, env=env, capture_output=True)
    kill_after_step(_cmd(killed), killed, 3, env, timeout_s=120)
    subprocess.run(_cmd(killed), check=True, env=env, capture_output=True)
    expected, resumed = _metrics(straight), _metrics(killed)
    assert [r["training_step"] for r in resumed] == [0, 1, 2, 3, 4, 5, 6]  # no gap, no repeat
    assert resumed[4:] == expected[4:]
    assert same_final_weights(straight, killed)


def test_a_damaged_state_falls_back_to_the_previous_one(tmp_path, caplog):
    subprocess.run(_cmd(tmp_path, episodes=32), check=True, capture_output=True)
    states = list_states(tmp_path / "state")
    assert [p.name for p in states] == ["step_000001", "step_000002"]
    # A crash mid-write of the newest state's optimizer file: truncated bytes.
    trainer = states[-1] / "trainer.pt"
    trainer.write_bytes(trainer.read_bytes()[:100])
    state = load_latest_state(tmp_path / "state")
    assert state.step == 1 and "does not match its checksum" in caplog.text


@pytest.mark.slow
def test_sigterm_finishes_the_step_saves_state_and_says_how_to_resume(tmp_path):
    # 10 steps: the signal comes after step 2, and the rerun finishes the rest (40 cost 5 min
    # on a loaded 2-core machine, for nothing more tested).
    cmd = _cmd(tmp_path, episodes=16 * 10) + ["checkpoint.checkpoint_state_freq=0"]
    proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    metrics = tmp_path / "metrics.jsonl"
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline and (
            not metrics.exists() or len(metrics.read_text().splitlines()) < 3):
        time.sleep(0.01)
    proc.send_signal(signal.SIGTERM)
    _, err = proc.communicate(timeout=60)
    assert proc.returncode == 128 + signal.SIGTERM
    assert "stopped by SIGTERM after step" in err and "rerun the same command" in err
    step = load_latest_state(tmp_path / "state").step
    assert len(_metrics(tmp_path)) == step + 1  # every finished step logged, no more
    subprocess.run(cmd, check=True, capture_output=True)
    assert [r["training_step"] for r in _metrics(tmp_path)] == list(range(11))


def test_repeated_non_finite_gradients_abort_keeping_the_last_good_state(tmp_path, capsys):
    from rlvr.cli import main

    # A learning rate this large turns the weights to inf after one update: every later
    # gradient is non-finite and skipped, until the run gives up.
    code = main(["train", "configs/tiny.yaml", f"experiment.output_dir={tmp_path}",
                 "experiment.total_episodes=160", "optimizer.learning_rate=1e30",
                 "optimizer.max_consecutive_skipped_steps=2", "checkpoint.checkpoint_state_freq=1",
                 "algorithm.filter_zero_std_samples=false", "logging.progress_bar=false",
                 "eval.local_eval_every=0", "checkpoint.save_freq=0"])
    assert code == 3 and "non-finite gradients in 2 consecutive steps" in capsys.readouterr().err
    rows = _metrics(tmp_path)
    skipped = [r["training_step"] for r in rows if r.get("optim/skipped_steps")]
    assert len(skipped) == 2 and skipped[-1] == rows[-1]["training_step"]
    # The newest state is from before the skipped steps.
    assert load_latest_state(tmp_path / "state").step == skipped[0] - 1
    assert not (tmp_path / "final").exists()


DIE_MID_SAVE = '''
import os, signal, sys
import rlvr.checkpoint.state as state
real_save = state.save_file

def save_then_die(tensors, path, *args, **kwargs):
    if "step_000003" in str(path):  # half a file, then the process is killed
        with open(path, "wb") as f:
            f.write(b"partial")
        os.kill(os.getpid(), signal.SIGKILL)
    return real_save(tensors, path, *args, **kwargs)

state.save_file = save_then_die
from rlvr.cli import main
sys.exit(main(sys.argv[1:]))
'''


@pytest.mark.slow
def test_killed_in_the_middle_of_a_state_save_resumes_from_the_previous_state(tmp_path):
    straight, killed = tmp_path / "straight", tmp_path / "killed"
    subprocess.run(_cmd(straight), check=True, capture_output=True)
    script = tmp_path / "die_mid_save.py"
    script.write_text(DIE_MID_SAVE)
    died = subprocess.run([sys.executable, str(script), *_cmd(killed)[3:]], capture_output=True)
    assert died.returncode == -signal.SIGKILL
    assert [p.name for p in list_states(killed / "state")] == ["step_000001", "step_000002"]
    assert (killed / "state" / ".tmp-step_000003").exists()  # the torn save, never renamed in
    resumed = subprocess.run(_cmd(killed), check=True, capture_output=True, text=True)
    assert "resumed from the training state of step 2" in resumed.stderr
    assert _metrics(killed)[3:] == _metrics(straight)[3:]
    assert same_final_weights(straight, killed)


_SIGTERM_AT_FINAL_WRITE = """
import signal, sys
import rlvr.run.loop as trainer
write = trainer.save_final_model
def signalled_as_it_starts(*args, **kwargs):
    signal.raise_signal(signal.SIGTERM)  # a time limit or preemption, as the final write starts
    return write(*args, **kwargs)
trainer.save_final_model = signalled_as_it_starts
from rlvr.cli import main
sys.exit(main(sys.argv[1:]))
"""


def test_a_sigterm_during_the_final_write_waits_for_the_final_model(tmp_path):
    """The final model is the only copy of a run's weights where it keeps no state: a signal
    used to kill its write (exit 143, no `final/`), and the rerun then called the run finished."""
    args = ["train", "configs/tiny.yaml", f"experiment.output_dir={tmp_path}",
            "experiment.total_episodes=32", "logging.progress_bar=false",
            "eval.local_eval_every=0", "checkpoint.save_freq=0",
            "checkpoint.checkpoint_state_freq=0"]
    done = subprocess.run([sys.executable, "-c", _SIGTERM_AT_FINAL_WRITE, *args],
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    assert "came after the last step: the final model was written first" in done.stderr
    assert (tmp_path / "final" / "config.json").is_file()
