"""One real vLLM server on the tiny model for the whole session, started the way a user starts
one (`rlvr serve`), shared by every test that needs a real server, and always stopped."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import time

import pytest

from rlvr.rollout.vllm_engine import INSTALL_HINT, vllm_available

STARTUP_TIMEOUT_S = 600  # ~50 s on a quiet 2-core machine, 100+ s beside other work


@pytest.fixture(scope="session")
def vllm_server(tiny_model_dir, tmp_path_factory):
    """(address, the `rlvr serve` process). The server holds the tiny model's weights as
    loaded; a test that loads others must leave it as it found it (`restore_tiny_weights`)."""
    if not vllm_available():
        pytest.skip(f"vLLM is not installed: {INSTALL_HINT}")
    log = tmp_path_factory.mktemp("vllm_server") / "server.log"
    cmd = [sys.executable, "-m", "rlvr.cli", "serve", tiny_model_dir,
           "rollout.vllm_kv_cache_gb=0.05", "rollout.vllm_max_model_len=1024",
           # fp32 weights: the tests hold its logprobs to the learner's at fp32 tolerances, and
           # `rlvr serve` runs in its own process, out of reach of conftest's bf16 pin.
           "rollout.dtype=float32", "--port", "0",
           "--log", str(log), "--startup-timeout", str(STARTUP_TIMEOUT_S)]
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            start_new_session=True)
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
