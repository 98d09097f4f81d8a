"""A real one-node Slurm cluster for the Slurm launcher's tests: started once per session with
`../shared/tools/start-local-slurm.sh` (Debian's Slurm, no munge, fake GPU devices for --gres)
and always stopped at the end with `stop-local-slurm.sh`."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
SLURM_TOOLS = ROOT.parent / "shared" / "tools"
START_TIMEOUT_S = 900  # a first start installs the Debian packages


@pytest.fixture(scope="session")
def local_slurm():
    """The node's short host name (what `scontrol show hostnames` gives the job)."""
    start, stop = SLURM_TOOLS / "start-local-slurm.sh", SLURM_TOOLS / "stop-local-slurm.sh"
    if not start.exists() or not stop.exists():
        pytest.skip(f"no local Slurm cluster: {start} or {stop} is missing")
    if os.geteuid() != 0:
        pytest.skip("starting the local Slurm cluster needs root (it installs packages and "
                    "runs slurmctld/slurmd)")
    try:
        done = subprocess.run([str(start)], capture_output=True, text=True,
                              timeout=START_TIMEOUT_S)
        if done.returncode != 0:
            raise RuntimeError(f"{start} failed ({done.returncode}):\n{done.stderr[-3000:]}")
        host = subprocess.run(["hostname", "-s"], capture_output=True, text=True,
                              check=True).stdout.strip()
        yield host
    finally:
        subprocess.run([str(stop)], capture_output=True, timeout=300)
