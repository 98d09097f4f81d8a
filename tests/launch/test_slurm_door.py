"""A Slurm run's servers behind the door: `prepare` writes the run's key 0600 beside the job's
files, the script names only the file (never the key, never 0.0.0.0), each server binds its
node's address as Slurm knows it (NodeAddr), and the script's health wait gets through a server
that demands the key. Run by bash with stand-ins for Slurm's commands and the servers."""

from __future__ import annotations

import os
import stat
import subprocess
import sys
from pathlib import Path

from rlvr.config import load_config
from rlvr.launch.slurm import prepare
from rlvr.serving.auth import read_key_file
from rlvr.serving.server import free_port
from tests.launch.slurm_fakes import FAKE_SRUN

ROOT = Path(__file__).resolve().parents[2]
FAKE_SERVER = ROOT / "tests" / "serving" / "fake_server.py"

# The nodes' python: `rlvr serve` is a fake server that demands the key from the file the
# script names, bound where it is told; `rlvr train` reports what it was given.
FAKE_PYTHON = f"""#!/bin/bash
if [[ $1 == -m && $3 == serve ]]; then
    while [[ $1 != --host ]]; do shift; done
    RLVR_SERVER_KEY=$(cat "$RLVR_SERVER_KEY_FILE") exec {sys.executable} {FAKE_SERVER} \\
        --host "$2" --port "$4"
elif [[ $1 == -m && $3 == train ]]; then
    echo "fake trainer: servers $RLVR_LLM_SERVER_ADDRS key file $RLVR_SERVER_KEY_FILE ${{*:5}}"
    exit 0
fi
exec {sys.executable} "$@"
"""

FAKE_SCONTROL = """#!/bin/bash
if [[ $1 == show && $2 == hostnames ]]; then echo node-a; exit 0; fi
if [[ $1 == show && $2 == node ]]; then
    echo "NodeName=node-a Arch=x86_64 NodeAddr=127.0.0.1 NodeHostName=node-a State=IDLE"
    exit 0
fi
exit 1
"""


def _cfg(tmp_path, port: int):
    return load_config(ROOT / "configs" / "tiny.yaml", [
        "rollout.engine=remote", "distributed.launcher=slurm",
        f"experiment.output_dir={tmp_path / 'run'}", f"rollout.server_port={port}",
        "rollout.server_startup_timeout_s=20"])


def test_the_job_holds_the_key_file_s_path_only_and_binds_no_wildcard(tmp_path, monkeypatch):
    monkeypatch.delenv("RLVR_SERVER_KEY", raising=False)
    monkeypatch.delenv("RLVR_SERVER_KEY_FILE", raising=False)
    files, script = prepare(_cfg(tmp_path, 9100), python="/venv/bin/python", workdir="/w")
    key_file = tmp_path / "run" / "server.key"
    assert stat.S_IMODE(key_file.stat().st_mode) == 0o600
    key = read_key_file(key_file)
    assert f"export RLVR_SERVER_KEY_FILE={key_file}" in script
    assert key not in script and key not in files.config.read_text()
    assert "0.0.0.0" not in script and '--host "${NODE_ADDRS[0]}"' in script


def test_servers_bind_their_node_address_and_the_health_wait_sends_the_key(tmp_path,
                                                                           monkeypatch):
    monkeypatch.delenv("RLVR_SERVER_KEY", raising=False)
    monkeypatch.delenv("RLVR_SERVER_KEY_FILE", raising=False)
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    for name, text in [("srun", FAKE_SRUN), ("python", FAKE_PYTHON), ("scontrol", FAKE_SCONTROL),
                       ("squeue", "#!/bin/bash\nexit 0\n"), ("scancel", "#!/bin/bash\nexit 1\n")]:
        (bin_dir / name).write_text(text)
        (bin_dir / name).chmod(0o755)
    port = free_port()
    files, _ = prepare(_cfg(tmp_path, port), python=str(bin_dir / "python"), workdir=str(tmp_path))
    env = {**os.environ, "PATH": f"{bin_dir}:{os.environ['PATH']}", "SLURM_JOB_ID": "7",
           "SLURM_JOB_NODELIST": "node-a"}
    job = subprocess.run(["bash", str(files.script)], env=env, text=True, capture_output=True,
                         timeout=120)
    out = job.stdout + job.stderr
    assert job.returncode == 0, out
    trainer = files.trainer_log.read_text()
    assert f"servers http://127.0.0.1:{port} " in trainer  # NodeAddr, not the node's name
    assert "rollout.weight_sync_host=127.0.0.1" in trainer
    key = read_key_file(tmp_path / "run" / "server.key")
    for text in (out, trainer, files.server_log(0).read_text()):
        assert key not in text
