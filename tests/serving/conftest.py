"""One real vLLM server on the tiny model for the whole session, started the way a user starts
one (`rlvr serve`), shared by every test that needs a real server, and always stopped. It
serves a run of its own (`vllm_run`: the run's directory and key), as a launcher's would: every
route wants the key, and it reloads weights only from the run's `weight_updates`."""

from __future__ import annotations

import os
import re
import secrets
import signal
import subprocess
import sys
import threading
import time
from contextlib import contextmanager
from pathlib import Path
from typing import NamedTuple

import pytest

from rlvr.rollout.vllm.engine import INSTALL_HINT, vllm_available

# The run's key as rlvr.serving.auth keeps it, written here with os alone so the server tests
# also run against the code before the key existed (and show what it let through).
KEY_ENV, KEY_FILE_ENV = "RLVR_SERVER_KEY", "RLVR_SERVER_KEY_FILE"

STARTUP_TIMEOUT_S = 600  # ~50 s on a quiet 2-core machine, 100+ s beside other work


class VLLMRun(NamedTuple):
    output_dir: Path  # the run's directory: weights reload from output_dir/weight_updates only
    key: str  # the run's server key (in output_dir/server.key, 0600)

    @property
    def key_file(self) -> Path:
        return self.output_dir / "server.key"

    @property
    def weights_dir(self) -> Path:
        return self.output_dir / "weight_updates"


@pytest.fixture(scope="session")
def vllm_run(tmp_path_factory) -> VLLMRun:
    return new_vllm_run(tmp_path_factory.mktemp("vllm_run"))


def new_vllm_run(output_dir: Path) -> VLLMRun:
    """A run directory with a fresh key in `server.key` (0600), as a launcher makes one."""
    key = secrets.token_urlsafe(32)
    fd = os.open(output_dir / "server.key", os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    os.write(fd, key.encode())
    os.close(fd)
    return VLLMRun(output_dir, key)


@pytest.fixture(scope="session")
def vllm_server(tiny_model_dir, tmp_path_factory, vllm_run):
    """(address, the `rlvr serve` process). The server holds the tiny model's weights as
    loaded; a test that loads others must leave it as it found it (`restore_tiny_weights`)."""
    if not vllm_available():
        pytest.skip(f"vLLM is not installed: {INSTALL_HINT}")
    with rlvr_serve(tiny_model_dir, vllm_run,
                    tmp_path_factory.mktemp("vllm_server") / "server.log") as started:
        yield started


@contextmanager
def rlvr_serve(model_dir: str, run: VLLMRun, log: Path):
    """`rlvr serve MODEL` for `run`, in a process group of its own: (address, process), and
    stopped after (SIGTERM, then SIGKILL to the group) unless the caller stopped it."""
    env = {k: v for k, v in os.environ.items() if k != KEY_ENV}
    env[KEY_FILE_ENV] = str(run.key_file)  # the key in a file, not on the command line
    cmd = [sys.executable, "-m", "rlvr.cli", "serve", model_dir,
           f"experiment.output_dir={run.output_dir}",
           "rollout.vllm.kv_cache_gb=0.05", "rollout.vllm.max_model_len=1024",
           # fp32 weights: the tests hold its logprobs to the learner's at fp32 tolerances, and
           # `rlvr serve` runs in its own process, out of reach of conftest's bf16 pin.
           "rollout.dtype=float32", "--port", "0",
           "--log", str(log), "--startup-timeout", str(STARTUP_TIMEOUT_S)]
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            start_new_session=True, env=env)
    try:
        address = _wait_for_address(proc, log)
        yield address, proc
    finally:
        if proc.poll() is None:
            proc.send_signal(signal.SIGTERM)
            try:
                proc.wait(timeout=60)
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait()


def _wait_for_address(proc: subprocess.Popen, log) -> str:
    deadline = time.monotonic() + STARTUP_TIMEOUT_S + 30
    while time.monotonic() < deadline:
        line = proc.stdout.readline()
        if not line and proc.poll() is not None:
            raise RuntimeError(f"rlvr serve exited {proc.returncode}: {proc.stderr.read()[-2000:]}"
                               f"\n{log.read_text()[-2000:] if log.exists() else ''}")
        found = re.search(r"at (http://\S+) \(health", line)
        if found:
            return found.group(1)
    raise RuntimeError("rlvr serve printed no address")


@pytest.fixture
def ignore_eos(monkeypatch):
    """Every sample the engine asks a server for runs to its max_tokens (vLLM's ignore_eos):
    long enough for a test to act while it is in flight."""
    import rlvr.serving.client as client

    body = client.generate_body
    monkeypatch.setattr(client, "generate_body", lambda *a: {**body(*a), "sampling_params": {
        **body(*a)["sampling_params"], "ignore_eos": True}})


def wait_until_running(address: str, key: str, worker: threading.Thread,
                       timeout_s: float = 60.0) -> bool:
    """Until the server reports a request running (its Prometheus gauge), so what the test
    does next (a weight update, a stop) really lands while the request is in flight, however
    slow the machine; False if the request that `worker` sends finished first."""
    import httpx

    from rlvr.serving.client import SignedRequests
    from rlvr.serving.server import server_name

    deadline = time.monotonic() + timeout_s
    text = ""
    while time.monotonic() < deadline:
        text = httpx.get(f"{address}/metrics", timeout=5, trust_env=False,
                         auth=SignedRequests(key, server_name(address))).text
        running = re.search(r"^vllm:num_requests_running\{[^}]*\} ([0-9.]+)", text, re.M)
        if running and float(running.group(1)) >= 1:
            return True
        if not worker.is_alive():
            return False
        time.sleep(0.05)
    gauges = re.findall(r"^vllm:num_requests_\w+\{[^}]*\} [0-9.]+", text, re.M)
    raise AssertionError(f"the long request never showed as running: {gauges}")
