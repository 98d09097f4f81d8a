"""`distributed.launcher=slurm`: one Slurm job whose steps run the inference servers and the
trainer; this module writes its files, submits it (or runs it inside the current allocation)
and waits for it, so `rlvr train` / `rlvr launch slurm` exit with the job's exit code.

What it is: `prepare` (the resolved config and the batch script under `<output_dir>/slurm/`),
`submit` (`sbatch --parsable`), `wait_for` (polls `squeue -j`, prints the job's and the
trainer's log as they grow, reads the exit code the script writes: no accounting needed, as
`sacct` is often absent), `run_in_allocation` (the script run by bash when SLURM_JOB_ID is
set), and `submit_and_wait`, which `rlvr.launch.launch` calls.
What it is not: the script itself (`rlvr.launch.slurm_script`), or the trainer: inside the job
the trainer step runs `rlvr train` with the servers' addresses set, and that just trains.

Every way out stops the job: it ends by itself; a SIGINT/SIGTERM here cancels it (the script's
trap stops each step and the trainer saves its state on the SIGTERM Slurm sends it); a job
that ends without writing its exit code (cancelled before it started, killed, a failed node)
is reported with `scontrol show job` and counted as failed: with the state Slurm ended it in
(NODE_FAIL, PREEMPTED, TIMEOUT, ...) named and exit code `SLURM_ENDED_EXIT_CODE` when Slurm
ended it, 1 otherwise. A job Slurm requeues (it asks for `--requeue`: preemption, a failed
node, `scontrol requeue`, or its own requeue after the time-limit signal,
`rlvr.launch.slurm_script`) is waited for through its restarts, each announced in one line.
"""

from __future__ import annotations

import dataclasses
import logging
import os
import re
import signal
import subprocess
import sys
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Sequence

from rlvr.checkpoint.atomic import write_text_atomic
from rlvr.config import Config, to_yaml
from rlvr.run.errors import SlurmJobFailed
from rlvr.launch.slurm_script import JobFiles, batch_script, job_layout
from rlvr.run.paths import RunPaths
from rlvr.serving.auth import prepare_run_key

log = logging.getLogger(__name__)

# squeue states after which nothing of the job runs any more (COMPLETING still stops steps).
ENDED_STATES = {"COMPLETED", "FAILED", "CANCELLED", "TIMEOUT", "NODE_FAIL", "OUT_OF_MEMORY",
                "PREEMPTED", "BOOT_FAIL", "DEADLINE", "SPECIAL_EXIT", "REVOKED"}
# States from which Slurm may still requeue a job that asked for it: keep polling this long.
REQUEUE_STATES = {"PREEMPTED", "NODE_FAIL"}
REQUEUE_WAIT_S = 30.0
# States in which Slurm, not the job, ended it; with no exit code written, `rlvr train` exits
# SLURM_ENDED_EXIT_CODE (docs/faults.md), naming the state.
SLURM_ENDED = {"NODE_FAIL": "its node failed", "PREEMPTED": "Slurm preempted it",
               "TIMEOUT": "it reached its time limit", "BOOT_FAIL": "its node failed to boot",
               "DEADLINE": "it reached its deadline", "OUT_OF_MEMORY": "it ran out of memory"}
SLURM_ENDED_EXIT_CODE = 10
EXIT_CODE_GRACE_S = 30.0  # a shared file system may show the exit code file this late
CANCEL_WAIT_S = 120.0  # after scancel, how long to wait for the job to end
MAX_SQUEUE_FAILURES = 10


@dataclass(frozen=True)
class SlurmJob:
    """A submitted job (`job_id` empty when run inside an allocation) and, once it ended, its
    exit code. Has `output_dir` as the trainer's `Run` has, for `rlvr train`'s closing line."""

    job_id: str
    files: JobFiles
    output_dir: Path
    exit_code: int | None = None
    state: str | None = None  # the last state squeue showed (None: never seen, or forgotten)


class SlurmCommands:
    """The Slurm client commands this launcher runs (tests substitute a fake)."""

    def sbatch(self, script: Path) -> str:
        out = subprocess.run(["sbatch", "--parsable", str(script)], capture_output=True,
                             text=True, timeout=120)
        if out.returncode != 0:
            raise SlurmJobFailed(f"sbatch {script} failed ({out.returncode}): "
                                 f"{out.stderr.strip() or out.stdout.strip()}", 1)
        return out.stdout.strip().split(";")[0]  # "id" or "id;cluster"

    def state(self, job_id: str) -> str | None:
        """The job's state; None once Slurm no longer knows it (ended and purged). `-t all`:
        without it squeue hides a job that ended (NODE_FAIL, PREEMPTED, ...) at once."""
        out = subprocess.run(["squeue", "-h", "-j", job_id, "-t", "all", "-o", "%T"],
                             capture_output=True, text=True, timeout=60)
        if out.returncode != 0:
            if "Invalid job id" in out.stderr:
                return None
            raise RuntimeError(f"squeue -j {job_id} failed: {out.stderr.strip()}")
        return out.stdout.strip() or None

    def show_job(self, job_id: str) -> str:
        out = subprocess.run(["scontrol", "show", "job", job_id], capture_output=True, text=True,
                             timeout=60)
        return (out.stdout or out.stderr).strip()

    def cancel(self, job_id: str) -> None:
        subprocess.run(["scancel", job_id], capture_output=True, timeout=60)


def submit_and_wait(cfg: Config, poll_s: float = 5.0,
                    commands: SlurmCommands | None = None) -> SlurmJob:
    """Run `cfg` as a Slurm job (inside the current allocation when SLURM_JOB_ID is set) and
    wait for it; raises `SlurmJobFailed` unless it exits 0."""
    if os.environ.get("SLURM_JOB_ID"):
        job = run_in_allocation(cfg)
    else:
        commands = commands or SlurmCommands()
        job = wait_for(submit(cfg, commands), commands, poll_s)
    return _checked(job, commands)


def prepare(cfg: Config, python: str = "", workdir: str = "") -> tuple[JobFiles, str]:
    """Check the run's input as the trainer will (`rlvr.run.build.check_run_inputs`), then write
    the resolved config (paths made absolute: the steps may start elsewhere) and the
    batch script under `<output_dir>/slurm/`, and the run's server key (`<output_dir>/server.key`,
    0600), which the script names; (its files, the script's text)."""
    from rlvr.run.build import check_run_inputs
    from rlvr.models import resolve_model_dir

    cfg = _absolute_paths(cfg)
    check_run_inputs(cfg)  # bad input fails here, before the job's files are written
    files = JobFiles(RunPaths(cfg.experiment.output_dir).slurm)
    model_dir = resolve_model_dir(cfg.model.name_or_path)  # built-ins are written here, once
    if Path(model_dir).exists():
        model_dir = str(Path(model_dir).resolve())
    # Checks every value the script holds (ConfigError) before anything of the run is written.
    script = batch_script(cfg, job_layout(cfg), files, model_dir,
                          python or cfg.distributed.slurm.python or sys.executable,
                          workdir or os.getcwd())
    files.dir.mkdir(parents=True, exist_ok=True)
    write_text_atomic(files.config, to_yaml(cfg))
    write_text_atomic(files.script, script)
    prepare_run_key(cfg.experiment.output_dir)  # the file the script names; 0600
    files.exit_code.unlink(missing_ok=True)  # an earlier job's must not be read as this one's
    return files, script


def submit(cfg: Config, commands: SlurmCommands | None = None) -> SlurmJob:
    files, _ = prepare(cfg)
    job_id = (commands or SlurmCommands()).sbatch(files.script)
    print(f"rlvr: submitted Slurm job {job_id}: logs in {files.dir} "
          f"(squeue -s -j {job_id}; scancel {job_id})", flush=True)
    return SlurmJob(job_id, files, files.dir.parent)


def wait_for(job: SlurmJob, commands: SlurmCommands, poll_s: float = 5.0) -> SlurmJob:
    """Wait until the job ends, printing its logs as they grow; a SIGINT/SIGTERM meanwhile
    cancels it. The exit code is read from the file the script writes (None: it wrote none;
    128 + the signal when we cancelled it before it could)."""
    follower = LogFollower([job.files.job_log, job.files.trainer_log])
    watch = _JobWatch(job.job_id, commands, follower)
    with _RaiseOnSignal() as stop:
        try:
            watch.until_ended(poll_s)
        except _Stop:
            print(f"rlvr: {signal.Signals(stop.signum).name}: cancelling Slurm job "
                  f"{job.job_id}", file=sys.stderr, flush=True)
            commands.cancel(job.job_id)
            watch.until_ended(poll_s, time.monotonic() + CANCEL_WAIT_S)
    follower.poll()
    exit_code = _read_exit_code(job.files, EXIT_CODE_GRACE_S)
    if exit_code is None and stop.signum is not None:
        exit_code = 128 + stop.signum
    return dataclasses.replace(job, exit_code=exit_code, state=watch.state)


def run_in_allocation(cfg: Config) -> SlurmJob:
    """The batch script run by bash in the current allocation (its #SBATCH lines are comments
    there; the steps take the allocation's nodes). Its output goes to `job.log`."""
    files, _ = prepare(cfg)
    print(f"rlvr: running in Slurm allocation {os.environ['SLURM_JOB_ID']}: logs in "
          f"{files.dir}", flush=True)
    follower = LogFollower([files.job_log, files.trainer_log])
    with open(files.job_log, "wb") as out, _RaiseOnSignal():  # as sbatch's --output would
        # A session of its own: a terminal's Ctrl-C reaches only us, and we pass on SIGTERM,
        # which the script's trap answers by stopping its steps.
        proc = subprocess.Popen(["bash", str(files.script)], stdout=out,
                                stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                start_new_session=True)
        try:
            while proc.poll() is None:
                follower.poll()
                time.sleep(1.0)
        except _Stop:
            proc.send_signal(signal.SIGTERM)
            try:
                proc.wait(timeout=CANCEL_WAIT_S)
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait()
    follower.poll()
    return SlurmJob("", files, files.dir.parent, _read_exit_code(files, EXIT_CODE_GRACE_S))


class LogFollower:
    """Prints what is appended to each file after it was made (files may appear late). What a
    file held before is an earlier job's and is skipped; a file that shrinks was started anew
    (srun and sbatch truncate their output files) and is followed from its start."""

    def __init__(self, paths: Sequence[Path], out=None):
        self.offsets = {Path(p): _size(Path(p)) for p in paths}
        self.out = out

    def poll(self) -> None:
        out = self.out or sys.stdout
        for path, offset in self.offsets.items():
            if _size(path) < offset:
                offset = 0
            try:
                with open(path, "rb") as f:
                    f.seek(offset)
                    data = f.read()
            except OSError:
                continue
            end = data.rfind(b"\n") + 1  # whole lines only; the rest waits for its newline
            if end:
                out.write(data[:end].decode(errors="replace"))
                out.flush()
            self.offsets[path] = offset + end


def _size(path: Path) -> int:
    try:
        return path.stat().st_size
    except OSError:
        return 0


class _JobWatch:
    """Polls one job until it ends, printing its logs as they grow and one line each time it
    is requeued (it ran, then is pending again). squeue failing (a controller restarting) is
    retried, MAX_SQUEUE_FAILURES times in a row at most. `state`: the last state seen."""

    def __init__(self, job_id: str, commands: SlurmCommands, follower: LogFollower):
        self.job_id, self.commands, self.follower = job_id, commands, follower
        self.state: str | None = None
        self.ran = False  # the job ran since it was (re)queued
        self.failures = 0
        self.requeue_deadline: float | None = None  # set while in a REQUEUE_STATES state

    def until_ended(self, poll_s: float, deadline: float | None = None) -> None:
        """Returns once squeue shows the job ended (or forgot it), or at `deadline`."""
        next_check = time.monotonic()
        while deadline is None or time.monotonic() < deadline:
            if time.monotonic() >= next_check:
                if self._ended(self._poll()):
                    return
                next_check = time.monotonic() + poll_s
            self.follower.poll()
            time.sleep(min(1.0, poll_s))

    def _poll(self) -> str | None:
        try:
            state = self.commands.state(self.job_id)
            self.failures = 0
        except RuntimeError as e:
            self.failures += 1
            if self.failures >= MAX_SQUEUE_FAILURES:
                raise
            log.warning("%s (try %d of %d)", e, self.failures, MAX_SQUEUE_FAILURES)
            return ""
        if state in ("RUNNING", "COMPLETING"):
            self.ran = True
        elif state in ("PENDING", "REQUEUED", "REQUEUE_HOLD") and self.ran:
            self.ran = False
            print(f"rlvr: {time.strftime('%H:%M:%S')} Slurm job {self.job_id} was requeued "
                  f"({state}; preempted, its node failed, its time was nearly up, or scontrol "
                  "requeue): it resumes from its saved training state when it runs again",
                  file=sys.stderr, flush=True)
        if state is not None and state != "":
            self.state = state
        return state

    def _ended(self, state: str | None) -> bool:
        if state is None:
            return True
        if state not in ENDED_STATES:
            self.requeue_deadline = None
            return False
        if state not in REQUEUE_STATES:
            return True
        # Slurm may requeue a preempted job or one whose node failed: give it the time to.
        if self.requeue_deadline is None:
            self.requeue_deadline = time.monotonic() + REQUEUE_WAIT_S
        return time.monotonic() >= self.requeue_deadline


def _read_exit_code(files: JobFiles, grace_s: float) -> int | None:
    deadline = time.monotonic() + grace_s
    while True:
        try:
            return int(files.exit_code.read_text().strip())
        except (OSError, ValueError):
            if time.monotonic() >= deadline:
                return None
            time.sleep(min(1.0, grace_s))


def _checked(job: SlurmJob, commands: SlurmCommands | None) -> SlurmJob:
    """`job` if it exited 0; else `SlurmJobFailed` naming the logs to read."""
    if job.exit_code == 0:
        return job
    what = f"Slurm job {job.job_id}" if job.job_id else "the run in this Slurm allocation"
    logs = f"logs: {job.files.trainer_log}, {job.files.job_log}, {job.files.dir}/server_*.log"
    if job.exit_code is None:
        shown = commands.show_job(job.job_id) if commands and job.job_id else ""
        state = job.state
        if state not in SLURM_ENDED:  # squeue forgot it: the controller may still know
            found = re.search(r"JobState=(\w+)", shown)
            state = found.group(1) if found else state
        if state in SLURM_ENDED:
            raise SlurmJobFailed(
                f"{what} ended in state {state}: {SLURM_ENDED[state]} and the job was "
                f"not requeued; rerun the same command to resume from the last training state "
                f"saved in {job.output_dir} (distributed.slurm.requeue=true requeues it by "
                f"itself); {logs}" + (f"\nscontrol show job {job.job_id}:\n{shown}" if shown
                                       else ""), SLURM_ENDED_EXIT_CODE)
        raise SlurmJobFailed(
            f"{what} ended without writing {job.files.exit_code} (cancelled before it ran, "
            f"killed, or its node failed); {logs}"
            + (f"\nscontrol show job {job.job_id}:\n{shown}" if shown else ""), 1)
    raise SlurmJobFailed(f"{what} exited with status {job.exit_code}; {logs}"
                         f"{_tail(job.files.trainer_log)}", job.exit_code)


def _tail(path: Path, lines: int = 5) -> str:
    try:
        tail = path.read_text(errors="replace").splitlines()[-lines:]
    except OSError:
        return ""
    return f"\nlast lines of {path}:\n  " + "\n  ".join(tail) if tail else ""


def _absolute_paths(cfg: Config) -> Config:
    c = cfg.checkpoint
    state_dir = str(Path(c.checkpoint_state_dir).resolve()) if c.checkpoint_state_dir else None
    return dataclasses.replace(
        cfg, experiment=dataclasses.replace(
            cfg.experiment, output_dir=str(Path(cfg.experiment.output_dir).resolve())),
        checkpoint=dataclasses.replace(c, checkpoint_state_dir=state_dir))


class _Stop(Exception):
    """A SIGINT/SIGTERM arrived while waiting for the job."""


class _RaiseOnSignal:
    """Context manager: SIGINT/SIGTERM raise `_Stop` (`signum` notes which); a second one acts
    as it would without us. Handlers restored on exit; off the main thread it does nothing."""

    def __init__(self) -> None:
        self.signum: int | None = None
        self._previous: dict[int, object] = {}

    def _handle(self, signum: int, frame) -> None:
        self.signum = signum
        for sig, handler in self._previous.items():
            signal.signal(sig, handler)
        raise _Stop()

    def __enter__(self) -> "_RaiseOnSignal":
        if threading.current_thread() is threading.main_thread():
            for sig in (signal.SIGINT, signal.SIGTERM):
                self._previous[sig] = signal.signal(sig, self._handle)
        return self

    def __exit__(self, *exc) -> None:
        for sig, handler in self._previous.items():
            signal.signal(sig, handler)


__all__ = ["SlurmCommands", "SlurmJob", "SlurmJobFailed", "prepare", "submit",
           "submit_and_wait", "wait_for"]
