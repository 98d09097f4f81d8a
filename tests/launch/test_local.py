"""The local launcher's servers (`rollout.engine=remote` with no addresses): started before
training, healthy before the first request, stopped on every way out: a normal end, an error,
and the launcher killed outright (the servers' parent-death signal). Fake servers stand in for
vLLM (tests/serving/fake_server.py), started as processes exactly as vLLM would be."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

import rlvr.serving.server as server_module
from rlvr.config import load_config
from rlvr.launch import launch, needs_servers
from rlvr.serving.auth import read_key_file
from rlvr.serving.server import is_healthy

ROOT = Path(__file__).resolve().parents[2]
FAKE = str(ROOT / "tests" / "serving" / "fake_server.py")


def _fake_command(settings, python=sys.executable):
    return [python, FAKE, "--port", str(settings.port)]


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    with open(f"/proc/{pid}/stat") as f:  # a zombie awaiting its parent counts as gone
        return f.read().split()[2] != "Z"


def _cfg(tmp_path, *extra):
    return load_config("configs/tiny.yaml", [
        f"experiment.output_dir={tmp_path}", "experiment.total_episodes=32",
        "rollout.engine=remote", "rollout.num_servers=2", "eval.local_eval_every=0",
        "health.enabled=false",  # the fake servers' made-up logprobs meet the mismatch gate
        "eval.eval_at_start=false", "checkpoint.save_final=false", "checkpoint.save_freq=0",
        "logging.progress_bar=false", "rewards.num_workers=0", *extra])


def test_servers_are_needed_only_without_addresses(tmp_path, monkeypatch):
    monkeypatch.delenv("RLVR_LLM_SERVER_ADDRS", raising=False)
    assert needs_servers(_cfg(tmp_path))
    assert not needs_servers(_cfg(tmp_path, "rollout.server_addresses=[http://h:1]"))
    monkeypatch.setenv("RLVR_LLM_SERVER_ADDRS", "h:1")
    assert not needs_servers(_cfg(tmp_path))


def test_launch_starts_the_servers_trains_on_them_and_stops_them(tmp_path, monkeypatch):
    monkeypatch.delenv("RLVR_LLM_SERVER_ADDRS", raising=False)
    monkeypatch.setattr(server_module, "server_command", _fake_command)
    started = []
    real_launch = server_module.ServerProcess.launch

    def recording_launch(self):
        real_launch(self)
        started.append(self)

    monkeypatch.setattr(server_module.ServerProcess, "launch", recording_launch)
    run = launch(_cfg(tmp_path))
    assert [h["training_step"] for h in run.history][-1] == 2
    assert len(started) == 2
    assert run.cfg.rollout.server_addresses == [p.address for p in started]
    # The run's key, written 0600 for its trainer, is the one its servers demand.
    key = read_key_file(tmp_path / "server.key")
    assert all(p.key == key for p in started)
    assert all(not is_healthy(p.address, 1.0, key=key) for p in started)  # stopped at the end
    assert (tmp_path / "servers" / "server_0.log").exists()


def test_an_error_in_training_stops_the_servers(tmp_path, monkeypatch):
    monkeypatch.delenv("RLVR_LLM_SERVER_ADDRS", raising=False)
    monkeypatch.setattr(server_module, "server_command", _fake_command)
    seen = []

    def failing_train(cfg, start=None):
        seen.extend(cfg.rollout.server_addresses)
        key = read_key_file(tmp_path / "server.key")
        assert all(is_healthy(a, 1.0, key=key) for a in seen)  # healthy before training starts
        raise RuntimeError("boom")

    monkeypatch.setattr("rlvr.run.loop.train", failing_train)
    with pytest.raises(RuntimeError, match="boom"):
        launch(_cfg(tmp_path))
    key = read_key_file(tmp_path / "server.key")
    assert len(seen) == 2 and not any(is_healthy(a, 1.0, key=key) for a in seen)


def test_servers_die_with_a_launcher_killed_outright(tmp_path):
    """SIGKILL leaves no chance to clean up: the kernel's parent-death signal stops them."""
    script = textwrap.dedent(f"""
        import sys, time
        sys.path[:0] = [{str(ROOT)!r}, {str(ROOT / 'src')!r}]
        import rlvr.serving.server as s
        from rlvr.launch.servers import LocalServers
        from tests.launch.test_local import _fake_command
        s.server_command = _fake_command
        servers = LocalServers(s.ServerSettings(model="none"), 2, {str(tmp_path)!r})
        servers.__enter__()
        print(" ".join(str(p.process.pid) for p in servers.processes), flush=True)
        time.sleep(600)
    """)
    parent = subprocess.Popen([sys.executable, "-c", script], stdout=subprocess.PIPE, text=True)
    try:
        pids = [int(p) for p in parent.stdout.readline().split()]
        assert len(pids) == 2 and all(_alive(p) for p in pids)
        parent.send_signal(signal.SIGKILL)
        parent.wait(timeout=30)
        deadline = time.monotonic() + 30
        while any(_alive(p) for p in pids) and time.monotonic() < deadline:
            time.sleep(0.2)
        assert not any(_alive(p) for p in pids)
    finally:
        if parent.poll() is None:
            parent.kill()
