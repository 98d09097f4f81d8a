"""The Slurm launcher: submitting, waiting, and the exit code `rlvr train` gets.

Fast tests use a fake Slurm client (the files written, the exit code read, a job that never
wrote one, a SIGINT that cancels the job). The two real runs use the local one-node Slurm
cluster (`local_slurm`) and a real vLLM server each (about 1-2 minutes to start here): the tiny
config trains to the end under `rlvr train ... distributed.launcher=slurm`, and a run whose
server step is cancelled mid-training stops with the server's address named and its last good
state saved, never hanging. The second also runs the GPU layout (`--exact --gres` steps) on the
cluster's fake GPU devices."""

from __future__ import annotations

import io
import json
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

import rlvr.launch.slurm as slurm_module
from rlvr.checkpoint.state import list_states, verify_state
from rlvr.cli import main
from rlvr.config import load_config
from rlvr.run.errors import SlurmJobFailed
from rlvr.launch.slurm import LogFollower, SlurmCommands, submit_and_wait
from rlvr.serving.server import free_port

ROOT = Path(__file__).resolve().parents[2]
TINY = str(ROOT / "configs" / "tiny.yaml")
REAL_RUN_TIMEOUT_S = 840  # a vLLM start takes 50-100+ s here; the tests' own limit is 900


class FakeSlurm(SlurmCommands):
    """sbatch accepts; squeue reports RUNNING `polls` times, then calls `on_end` and forgets
    the job."""

    def __init__(self, polls: int = 2, on_end=lambda files: None, during=None):
        self.polls, self.on_end, self.during = polls, on_end, during
        self.submitted: list[Path] = []
        self.cancelled: list[str] = []
        self.calls = 0

    def sbatch(self, script: Path) -> str:
        self.submitted.append(script)
        return "42"

    def state(self, job_id: str) -> str | None:
        self.calls += 1
        if self.cancelled or self.calls > self.polls:
            self.on_end(self.submitted[0].parent)
            return None
        if self.during is not None:
            self.during(self.calls)
        return "RUNNING"

    def show_job(self, job_id: str) -> str:
        return f"JobId={job_id} JobState=CANCELLED Reason=None"

    def cancel(self, job_id: str) -> None:
        self.cancelled.append(job_id)


def _cfg(output_dir: str, *extra: str):
    return load_config(TINY, [f"experiment.output_dir={output_dir}", "rollout.engine=remote",
                              "distributed.launcher=slurm", *extra])


def _exits(code: int, log: str = ""):
    def write(slurm_dir: Path) -> None:
        if log:
            (slurm_dir / "trainer.log").write_text(log)
        (slurm_dir / "exit_code").write_text(f"{code}\n")
    return write


@pytest.fixture
def no_slurm_env(monkeypatch, tmp_path):
    monkeypatch.delenv("SLURM_JOB_ID", raising=False)
    monkeypatch.chdir(tmp_path)


def test_a_job_that_exits_0_returns_after_writing_its_config_and_script(no_slurm_env, tmp_path,
                                                                        capsys):
    fake = FakeSlurm(on_end=_exits(0, "step 3 done\n"))
    job = submit_and_wait(_cfg("runs/x"), poll_s=0.01, commands=fake)
    slurm_dir = tmp_path / "runs" / "x" / "slurm"
    assert (job.job_id, job.exit_code, job.output_dir) == ("42", 0, tmp_path / "runs" / "x")
    assert fake.submitted == [slurm_dir / "job.sbatch"]
    # The steps may start elsewhere: the config they load holds absolute paths, and loads.
    resolved = load_config(slurm_dir / "config.yaml")
    assert resolved.experiment.output_dir == str(tmp_path / "runs" / "x")
    assert f"#SBATCH --chdir={tmp_path}" in fake.submitted[0].read_text()
    out = capsys.readouterr().out
    assert "submitted Slurm job 42" in out and "step 3 done" in out  # the trainer's log, followed


def test_the_trainers_exit_code_reaches_the_caller_with_its_last_lines(no_slurm_env):
    fake = FakeSlurm(on_end=_exits(4, "rlvr: every server gone: http://n1:8100\n"))
    with pytest.raises(SlurmJobFailed, match=r"exited with status 4(.|\n)*http://n1:8100") as e:
        submit_and_wait(_cfg("runs/x"), poll_s=0.01, commands=fake)
    assert e.value.exit_code == 4


def test_a_job_that_wrote_no_exit_code_fails_with_what_slurm_knows(no_slurm_env, monkeypatch):
    monkeypatch.setattr(slurm_module, "EXIT_CODE_GRACE_S", 0.0)
    with pytest.raises(SlurmJobFailed, match="without writing(.|\n)*JobState=CANCELLED") as e:
        submit_and_wait(_cfg("runs/x"), poll_s=0.01, commands=FakeSlurm())
    assert e.value.exit_code == 1


def test_sigint_while_waiting_cancels_the_job(no_slurm_env, monkeypatch):
    monkeypatch.setattr(slurm_module, "EXIT_CODE_GRACE_S", 0.0)
    fake = FakeSlurm(polls=100, during=lambda calls: calls == 2 and signal.raise_signal(
        signal.SIGINT))
    # What was there before, not Python's default: a shell's background job starts with SIGINT
    # ignored.
    before = signal.getsignal(signal.SIGINT)
    with pytest.raises(SlurmJobFailed) as e:
        submit_and_wait(_cfg("runs/x"), poll_s=0.01, commands=fake)
    assert fake.cancelled == ["42"] and e.value.exit_code == 130
    assert signal.getsignal(signal.SIGINT) is before  # restored


def test_squeue_failing_now_and_then_is_retried(no_slurm_env):
    fake = FakeSlurm(on_end=_exits(0))
    answers = iter([RuntimeError("squeue: slurm_load_jobs error: Socket timed out")] * 3)

    def flaky(job_id: str):
        error = next(answers, None)
        if error is not None:
            raise error
        return FakeSlurm.state(fake, job_id)

    fake.state = flaky
    assert submit_and_wait(_cfg("runs/x"), poll_s=0.01, commands=fake).exit_code == 0


def test_the_log_follower_prints_whole_new_lines_as_they_come(tmp_path):
    path, out = tmp_path / "trainer.log", io.StringIO()
    path.write_text("an earlier job's long log\n" * 10)
    follower = LogFollower([path, tmp_path / "not_yet.log"], out=out)
    follower.poll()
    assert out.getvalue() == ""  # an earlier job's
    path.write_text("step 1\nstep")  # the new job's step truncates it
    follower.poll()
    assert out.getvalue() == "step 1\n"
    with open(path, "a") as f:
        f.write(" 2\n")
    (tmp_path / "not_yet.log").write_text("server up\n")
    follower.poll()
    assert out.getvalue() == "step 1\nstep 2\nserver up\n"


def test_no_wait_is_refused_for_launchers_that_train_here(capsys):
    assert main(["launch", "local", TINY, "--no-wait"]) == 2
    assert "--no-wait submits a Slurm job" in capsys.readouterr().err


# ---- real runs on the local Slurm cluster ----

def _rlvr(args: list[str], log: Path) -> subprocess.Popen:
    env = {k: v for k, v in os.environ.items()
           if not k.startswith("SLURM_") and k != "RLVR_LLM_SERVER_ADDRS"}
    with open(log, "wb") as out:  # a file, not a pipe: the launcher prints the trainer's log
        return subprocess.Popen([sys.executable, "-m", "rlvr.cli", *args], cwd=ROOT, env=env,
                                stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)


def _real_overrides(out: Path, port: int) -> list[str]:
    return [f"experiment.output_dir={out}", "rollout.engine=remote",
            "rollout.vllm.kv_cache_gb=0.05", "rollout.vllm.max_model_len=512",
            f"rollout.server_port={port}", "rollout.server_startup_timeout_s=600",
            "logging.progress_bar=false"]


def _job_id(log: Path) -> str:
    found = re.search(r"submitted Slurm job (\d+)", log.read_text(errors="replace"))
    assert found, log.read_text(errors="replace")[-3000:]
    return found.group(1)


def _processes_of_job(job_id: str) -> list[str]:
    """Processes still carrying the job's id in their environment (a server, vLLM's engine)."""
    mark, found = f"SLURM_JOB_ID={job_id}".encode(), []
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            if mark in Path(f"/proc/{pid}/environ").read_bytes().split(b"\0"):
                found.append(Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ")
                             .decode(errors="replace"))
        except OSError:  # gone meanwhile, or not ours to read
            continue
    return found


def _assert_nothing_left(job_id: str) -> None:
    deadline = time.monotonic() + 30  # Slurm's KillWait, and then some
    while (left := _processes_of_job(job_id)) and time.monotonic() < deadline:
        time.sleep(1)
    assert not left, f"processes of job {job_id} outlived it: {left}"


def _metrics_steps(path: Path) -> list[int]:
    if not path.exists():
        return []
    lines = [line for line in path.read_text().splitlines() if line.strip()]
    return [json.loads(line)["training_step"] for line in lines if line.endswith("}")]


@pytest.mark.slow
@pytest.mark.timeout(900)
def test_the_tiny_config_trains_under_the_slurm_launcher(local_slurm, tmp_path):
    pytest.importorskip("vllm", reason="the inference server is vLLM's", exc_type=ImportError)
    out, log = tmp_path / "run", tmp_path / "rlvr.log"
    proc = _rlvr(["train", TINY, "distributed.launcher=slurm", *_real_overrides(out, free_port())],
                 log)
    try:
        rc = proc.wait(timeout=REAL_RUN_TIMEOUT_S)
    finally:
        if proc.poll() is None:
            proc.send_signal(signal.SIGINT)  # cancels the job
            proc.wait(timeout=180)
    text = log.read_text(errors="replace")
    assert rc == 0, text[-4000:]
    assert [s for s in _metrics_steps(out / "metrics.jsonl") if s > 0] == [1, 2, 3]
    slurm_dir = out / "slurm"
    for name in ["job.sbatch", "config.yaml", "job.log", "trainer.log", "server_0.log"]:
        assert (slurm_dir / name).stat().st_size > 0, name
    assert (slurm_dir / "exit_code").read_text().strip() == "0"
    assert "inference server(s) healthy" in (slurm_dir / "job.log").read_text()
    assert "done: 3 steps" in (slurm_dir / "trainer.log").read_text()
    _assert_nothing_left(_job_id(log))


@pytest.mark.slow
@pytest.mark.timeout(900)
def test_a_server_step_killed_mid_run_stops_the_job_naming_it_with_the_state_saved(
        local_slurm, tmp_path):
    pytest.importorskip("vllm", reason="the inference server is vLLM's", exc_type=ImportError)
    out, log, port = tmp_path / "run", tmp_path / "rlvr.log", free_port()
    proc = _rlvr(["launch", "slurm", TINY, *_real_overrides(out, port),
                  "experiment.total_episodes=1600",  # 100 steps: far more than it will get to
                  "distributed.slurm.gpus_per_node=2"], log)  # the --gres steps, on fake GPUs
    try:
        deadline = time.monotonic() + REAL_RUN_TIMEOUT_S - 240
        while max(_metrics_steps(out / "metrics.jsonl"), default=0) < 2:
            assert proc.poll() is None, log.read_text(errors="replace")[-4000:]
            assert time.monotonic() < deadline, "no step 2 in time"
            time.sleep(0.5)
        job_id = _job_id(log)
        steps = subprocess.run(["squeue", "-h", "-s", "-j", job_id, "-o", "%i %j"],
                               capture_output=True, text=True, check=True).stdout
        server_step = next(line.split()[0] for line in steps.splitlines()
                           if line.split()[1] == "rlvr-server-0")
        subprocess.run(["scancel", server_step], check=True)
        rc = proc.wait(timeout=240)  # bounded: the run must not hang on a dead server
    finally:
        if proc.poll() is None:
            proc.send_signal(signal.SIGINT)
            proc.wait(timeout=180)
    text = log.read_text(errors="replace")
    assert rc == 4, text[-4000:]  # the trainer's EngineLost, as the job's exit code
    trainer_log = (out / "slurm" / "trainer.log").read_text(errors="replace")
    # The server was reached at its node's address as Slurm knows it (NodeAddr).
    node_addr = subprocess.run(["scontrol", "show", "node", "-o", local_slurm],
                               capture_output=True, text=True).stdout
    addr = next((f.split("=", 1)[1] for f in node_addr.split() if f.startswith("NodeAddr=")),
                local_slurm)
    assert f"http://{addr}:{port}" in trainer_log and "training state" in trainer_log
    states = list_states(out / "state")
    assert states and verify_state(states[-1]) is None, states
    assert (out / "slurm" / "exit_code").read_text().strip() == "4"
    _assert_nothing_left(job_id)


@pytest.mark.slow
@pytest.mark.timeout(1200)
def test_two_learner_tasks_under_slurm_give_the_local_launchers_losses(local_slurm, tmp_path):
    """`distributed.num_learners_per_node=[2]` under the Slurm launcher: one srun step of two
    learner tasks (ranks 0 and 1, one rendezvous) beside the server step, with the losses of
    the local launcher's two ranks on the same kind of server."""
    pytest.importorskip("vllm", reason="the inference server is vLLM's", exc_type=ImportError)
    two = ["distributed.num_learners_per_node=[2]", "distributed.collective_timeout_s=120",
           "algorithm.filter_zero_std_samples=false", "eval.local_eval_every=0",
           "model.num_threads=1", "checkpoint.save_freq=0"]
    runs = {}
    for launcher in ("slurm", "local"):
        out, log = tmp_path / launcher, tmp_path / f"{launcher}.log"
        proc = _rlvr(["train", TINY, f"distributed.launcher={launcher}", *two,
                      *_real_overrides(out, free_port())], log)
        try:
            rc = proc.wait(timeout=REAL_RUN_TIMEOUT_S)
        finally:
            if proc.poll() is None:
                proc.send_signal(signal.SIGINT)  # cancels the job, or stops the local run
                proc.wait(timeout=180)
        assert rc == 0, log.read_text(errors="replace")[-4000:]
        runs[launcher] = [json.loads(line) for line in
                          (out / "metrics.jsonl").read_text().splitlines()][1:]
    slurm_dir = tmp_path / "slurm" / "slurm"
    script = (slurm_dir / "job.sbatch").read_text()
    assert "--ntasks=2 --ntasks-per-node=2" in script and "--kill-on-bad-exit=1" in script
    trainer_log = (slurm_dir / "trainer.log").read_text()
    assert f"learner ranks on hosts: 0:{local_slurm}, 1:{local_slurm}" in trainer_log
    assert (slurm_dir / "exit_code").read_text().strip() == "0"
    _assert_nothing_left(_job_id(tmp_path / "slurm.log"))
    assert len(runs["slurm"]) == len(runs["local"]) == 3
    for a, b in zip(runs["slurm"], runs["local"]):
        for key in ("loss/policy_avg", "loss/kl_avg", "optim/grad_norm", "episode",
                    "objective/verifiable_reward"):
            assert a[key] == pytest.approx(b[key], rel=1e-4, abs=1e-6), (key, a, b)
