"""The local launcher's learner ranks: `distributed.num_learners_per_node=[N]` on one machine.

`LocalRanks(cfg)` makes this process rank 0 (the trainer) and starts ranks 1..N-1 as child
processes running the same `rlvr train` on the resolved config, each with the environment
torchrun would give it (RANK, WORLD_SIZE, LOCAL_RANK, LOCAL_WORLD_SIZE, MASTER_ADDR,
MASTER_PORT), so what they do next is `rlvr.distributed.ranks.follow`, as under torchrun or
srun. Their output goes to `<output_dir>/ranks/rank_<r>.log`.

Why not torchrun itself: rank 0 is the trainer, and staying this process keeps its exit code
(3, 4, 128+signal: `rlvr.run.interrupts`), its signal handling (a first SIGINT/SIGTERM saves state)
and its progress bar, where torchrun's agent would report any failure as exit 1. Starting the
ranks with `torchrun --nproc-per-node N -m rlvr.cli train ...` works too; this class is then
not used.

Every way out stops the ranks: rank 0's learner tells them to stop when it closes; a rank still
running `STOP_GRACE_S` later is killed (they ignore SIGTERM: rank 0 decides). The followers
run in sessions of their own, so a terminal's Ctrl-C reaches rank 0 only. A rank that dies
ends the run: its peers' collectives fail and rank 0 raises naming it; on the way out this
logs each rank's exit status and log file.
"""

from __future__ import annotations

import logging
import os
import signal
import subprocess
import sys
import threading
from pathlib import Path

from rlvr.checkpoint.atomic import write_text_atomic
from rlvr.config import Config, ConfigError, to_yaml
from rlvr.distributed.ranks import RankEnv
from rlvr.run.errors import RunFinished, TrainingInterrupted
from rlvr.run.paths import RunPaths
from rlvr.serving.server import free_port

log = logging.getLogger(__name__)

STOP_GRACE_S = 60.0  # after rank 0 is done, how long the others get to leave by themselves
_RANK_KEYS = ("RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE", "MASTER_ADDR",
              "MASTER_PORT")


class LocalRanks:
    """Context manager: ranks 1..N-1 run while it is open; this process is rank 0."""

    def __init__(self, cfg: Config, python: str = sys.executable):
        if len(cfg.distributed.num_learners_per_node) != 1:
            raise ConfigError(f"distributed.num_learners_per_node="
                              f"{list(cfg.distributed.num_learners_per_node)} spans several "
                              "nodes; the local launcher starts one machine's ranks: use "
                              "distributed.launcher=slurm or ray, or start the ranks with "
                              "torchrun on each node")
        self.cfg, self.python = cfg, python
        self.world_size = cfg.world_size
        self.dir = RunPaths(cfg.experiment.output_dir).ranks
        self.procs: dict[int, subprocess.Popen] = {}
        self._saved_env: dict[str, str | None] = {}
        self._saved_sigterm = None  # the SIGTERM handler before ours, while we hold it

    def log_path(self, rank: int) -> Path:
        return self.dir / f"rank_{rank}.log"

    def __enter__(self) -> "LocalRanks":
        self.dir.mkdir(parents=True, exist_ok=True)
        config = self.dir / "config.yaml"  # what every rank loads: the config rank 0 runs
        write_text_atomic(config, to_yaml(self.cfg))
        port = free_port()
        for rank in range(1, self.world_size):
            env = RankEnv(rank, self.world_size, rank, "127.0.0.1", port)
            with open(self.log_path(rank), "wb") as out:
                self.procs[rank] = subprocess.Popen(
                    [self.python, "-m", "rlvr.cli", "train", str(config)],
                    env={**os.environ, **env.to_environ()}, stdout=out,
                    stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, start_new_session=True)
        mine = RankEnv(0, self.world_size, 0, "127.0.0.1", port).to_environ()
        self._saved_env = {k: os.environ.get(k) for k in _RANK_KEYS}
        os.environ.update(mine)
        if threading.current_thread() is threading.main_thread():
            # Until the trainer's StopOnSignal takes SIGTERM over (and after it gives it back),
            # SIGTERM's default would kill this process outright, leaving the ranks in their
            # own sessions to wait out their rendezvous (~1.75 x collective_timeout_s).
            self._saved_sigterm = signal.signal(signal.SIGTERM, _exit_on_sigterm)
        log.info("learner ranks 1-%d started (logs: %s)", self.world_size - 1, self.dir)
        return self

    def __exit__(self, exc_type, exc, tb) -> None:
        if self._saved_sigterm is not None:
            signal.signal(signal.SIGTERM, self._saved_sigterm)
            self._saved_sigterm = None
        for key, value in self._saved_env.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value
        # A stop on a signal, or a rerun of a finished run, is no failure of the ranks.
        self.stop(failed=exc_type is not None
                  and not issubclass(exc_type, (TrainingInterrupted, RunFinished)))

    def stop(self, failed: bool = False) -> None:
        """Wait for the ranks to leave (rank 0 has told them, or has failed), kill the ones
        that do not; on a failure, log how each ended and where its log is."""
        for rank, proc in self.procs.items():
            try:
                proc.wait(timeout=5.0 if failed else STOP_GRACE_S)
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait()
            if failed or proc.returncode != 0:
                log.error("learner rank %d (pid %d) %s; its log: %s", rank, proc.pid,
                          _how_it_ended(proc.returncode), self.log_path(rank))
        self.procs = {}


def _exit_on_sigterm(signum: int, frame: object) -> None:
    """SIGTERM while the ranks are open and no StopOnSignal holds it: leave through the
    `with`, so that `LocalRanks.__exit__` stops the ranks, with the shell's status."""
    raise SystemExit(128 + signum)


def _how_it_ended(code: int) -> str:
    if code == 0:
        return "exited with status 0"
    if code == -signal.SIGKILL:
        return "was killed (SIGKILL: the out-of-memory killer, or stopped by this launcher)"
    if code < 0:
        return f"was killed by {signal.Signals(-code).name}"
    return f"exited with status {code}"
