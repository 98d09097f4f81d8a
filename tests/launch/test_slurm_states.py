"""What `rlvr train` under the Slurm launcher says when Slurm, not the job, ends or restarts it
(issue 53, item 2): a job requeued mid-run is waited for through its restart with one line
saying so; a job whose node failed, or that was preempted and not requeued, exits 10 naming
the state, not 1 as an unexplained end. A fake Slurm client plays squeue's states; the script's
requeue options are read from its text. The real requeues are tests/launch/test_slurm_requeue.py.
"""

from __future__ import annotations

from pathlib import Path

import pytest

import rlvr.launch.slurm as slurm_module
from rlvr.config import ConfigError, load_config
from rlvr.launch.slurm import SLURM_ENDED_EXIT_CODE, SlurmCommands, submit_and_wait
from rlvr.launch.slurm_script import JobFiles, batch_script, job_layout
from rlvr.run.errors import SlurmJobFailed

ROOT = Path(__file__).resolve().parents[2]
TINY = str(ROOT / "configs" / "tiny.yaml")


class ScriptedSlurm(SlurmCommands):
    """squeue answers the given states in turn, then forgets the job (None); `on_end` runs
    once, at the first state in which a job has ended."""

    def __init__(self, states: list[str], on_end=lambda slurm_dir: None):
        self.states, self.on_end = list(states), on_end
        self.slurm_dir: Path | None = None

    def sbatch(self, script: Path) -> str:
        self.slurm_dir = script.parent
        return "7"

    def state(self, job_id: str) -> str | None:
        state = self.states.pop(0) if self.states else None
        if state is None or state in slurm_module.ENDED_STATES:
            self.on_end(self.slurm_dir)
            self.on_end = lambda slurm_dir: None
        return state

    def show_job(self, job_id: str) -> str:
        return f"JobId={job_id} JobState=NODE_FAIL Reason=NodeDown"

    def cancel(self, job_id: str) -> None:
        pass


def _cfg(*extra: str):
    return load_config(TINY, ["experiment.output_dir=runs/x", "rollout.engine=remote",
                              "distributed.launcher=slurm", *extra])


@pytest.fixture
def no_slurm_env(monkeypatch, tmp_path):
    monkeypatch.delenv("SLURM_JOB_ID", raising=False)
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(slurm_module, "EXIT_CODE_GRACE_S", 0.0)
    monkeypatch.setattr(slurm_module, "REQUEUE_WAIT_S", 0.0)


def test_a_requeued_job_is_waited_for_through_its_restart_with_one_line(no_slurm_env, capsys):
    def exits_0(slurm_dir: Path) -> None:
        (slurm_dir / "exit_code").write_text("0\n")

    fake = ScriptedSlurm(["PENDING", "RUNNING", "COMPLETING", "PENDING", "PENDING", "RUNNING",
                          "COMPLETED"], on_end=exits_0)
    job = submit_and_wait(_cfg(), poll_s=0.01, commands=fake)
    assert job.exit_code == 0
    err = capsys.readouterr().err
    assert err.count("Slurm job 7 was requeued (PENDING;") == 1, err  # once, not per poll
    assert "resumes from its saved training state" in err


@pytest.mark.parametrize("state, why", [("NODE_FAIL", "its node failed"),
                                        ("PREEMPTED", "Slurm preempted it"),
                                        ("TIMEOUT", "it reached its time limit")])
def test_a_job_slurm_ended_without_an_exit_code_exits_10_naming_the_state(no_slurm_env, state,
                                                                          why):
    fake = ScriptedSlurm(["RUNNING", state, state])
    with pytest.raises(SlurmJobFailed) as e:
        submit_and_wait(_cfg(), poll_s=0.01, commands=fake)
    assert e.value.exit_code == SLURM_ENDED_EXIT_CODE == 10
    first = str(e.value).splitlines()[0]
    assert first.startswith(f"Slurm job 7 ended in state {state}: {why} and the job was not "
                            "requeued; rerun the same command to resume"), first


def test_a_node_failure_that_slurm_requeues_is_not_an_end(no_slurm_env, monkeypatch, capsys):
    """NODE_FAIL and PREEMPTED may be followed by a requeue: the wait goes on through them."""
    monkeypatch.setattr(slurm_module, "REQUEUE_WAIT_S", 5.0)
    fake = ScriptedSlurm(["RUNNING", "NODE_FAIL", "PENDING", "RUNNING", "COMPLETED"],
                         on_end=lambda d: (d / "exit_code").write_text("0\n"))
    assert submit_and_wait(_cfg(), poll_s=0.01, commands=fake).exit_code == 0
    assert "was requeued" in capsys.readouterr().err


def _script(*extra: str) -> str:
    cfg = _cfg(*extra)
    return batch_script(cfg, job_layout(cfg), JobFiles(Path("/r/slurm")), "/m", "/py", "/w")


def test_the_script_asks_for_requeue_and_the_time_limit_signal():
    script = _script()
    assert "#SBATCH --requeue" in script and "#SBATCH --signal=B:USR1@180" in script
    assert "#SBATCH --open-mode=append" in script  # each attempt's lines stay
    assert "SAVE_WAIT_S=150" in script
    assert "trap '" in script and "REQUEUE=1; exit 143' USR1" in script
    assert 'scontrol requeue "$SLURM_JOB_ID"' in script
    quiet = _script("distributed.slurm.requeue=false", "distributed.slurm.signal_grace_s=0")
    assert "#SBATCH --no-requeue" in quiet and "#SBATCH --signal=" not in quiet


def test_a_grace_slurm_cannot_take_is_refused():
    with pytest.raises(ConfigError, match=r"signal_grace_s=70000 must be in \[0, 65535\]"):
        _cfg("distributed.slurm.signal_grace_s=70000")


def test_a_job_squeue_forgot_is_named_by_the_state_scontrol_still_shows(no_slurm_env):
    """squeue without `-t all` hid a NODE_FAIL job at once (seen on Slurm 22.05): the state
    then comes from `scontrol show job`."""
    with pytest.raises(SlurmJobFailed, match="^Slurm job 7 ended in state NODE_FAIL") as e:
        submit_and_wait(_cfg(), poll_s=0.01, commands=ScriptedSlurm(["RUNNING"]))
    assert e.value.exit_code == 10
