"""The run's server key: written 0600 and only ever read from a private file or the
environment, and never on a server's command line. How it signs: test_signing.py."""

from __future__ import annotations

import os
import stat
import sys

import pytest

from rlvr.serving.auth import (KEY_ENV, KEY_FILE_ENV, ServerKeyError, client_key, is_loopback,
                               key_from_env, new_key, prepare_run_key, read_key_file,
                               run_key_path, write_key_file)
from rlvr.serving.server import ServerProcess, ServerSettings, server_command, server_env


@pytest.fixture(autouse=True)
def no_key_in_env(monkeypatch):
    monkeypatch.delenv(KEY_ENV, raising=False)
    monkeypatch.delenv(KEY_FILE_ENV, raising=False)


def test_a_key_file_is_0600_whatever_the_umask_and_replaces_the_last_one(tmp_path):
    old = os.umask(0)  # the most permissive umask: the file must still be private
    try:
        first = write_key_file(tmp_path / "run" / "server.key", "first-key")
        write_key_file(first, "second-key")
    finally:
        os.umask(old)
    assert stat.S_IMODE(first.stat().st_mode) == 0o600
    assert read_key_file(first) == "second-key"
    assert [p.name for p in first.parent.iterdir()] == ["server.key"]  # no temporary left


def test_a_key_file_others_can_read_a_symlink_or_an_empty_one_is_refused(tmp_path):
    path = write_key_file(tmp_path / "server.key", "k" * 20)
    path.chmod(0o644)
    with pytest.raises(ServerKeyError, match="open to other users"):
        read_key_file(path)
    path.chmod(0o600)
    (tmp_path / "link.key").symlink_to(path)
    with pytest.raises(ServerKeyError, match="cannot read"):
        read_key_file(tmp_path / "link.key")
    empty = tmp_path / "empty.key"
    empty.touch(mode=0o600)
    with pytest.raises(ServerKeyError, match="empty"):
        read_key_file(empty)


def test_keys_come_from_the_environment_first_then_the_runs_file(tmp_path, monkeypatch):
    run_file = write_key_file(run_key_path(tmp_path), "from-the-run")
    assert key_from_env() is None and client_key(run_file) == "from-the-run"
    other = write_key_file(tmp_path / "other.key", "from-a-file")
    monkeypatch.setenv(KEY_FILE_ENV, str(other))
    assert client_key(run_file) == "from-a-file"
    monkeypatch.setenv(KEY_ENV, "from-the-env")
    assert client_key(run_file) == "from-the-env"
    # A launcher writes the environment's key for its trainer, so both sides agree.
    assert prepare_run_key(tmp_path / "next") == "from-the-env"
    assert read_key_file(run_key_path(tmp_path / "next")) == "from-the-env"


def test_each_run_gets_a_fresh_random_key(tmp_path):
    keys = {prepare_run_key(tmp_path / f"run{i}") for i in range(3)} | {new_key()}
    assert len(keys) == 4 and all(len(k) >= 40 for k in keys)


def test_loopback_is_told_from_every_interface_and_from_other_addresses():
    assert is_loopback("127.0.0.1") and is_loopback("localhost") and is_loopback("::1")
    assert not is_loopback("0.0.0.0") and not is_loopback("") and not is_loopback("::")
    assert not is_loopback("192.0.2.7") and not is_loopback("no-such-host.invalid")


def test_the_key_reaches_the_server_through_its_environment_never_its_command_line(tmp_path):
    settings = ServerSettings(model="m", port=5, weights_dir=str(tmp_path / "weight_updates"))
    command = server_command(settings)
    assert "--middleware" in command and "rlvr.serving.guard.ServerGuard" in command
    assert not any("key" in arg.lower() for arg in command)
    env = server_env(settings, base={"VLLM_API_KEY": "other", KEY_FILE_ENV: "/x"}, key="s3cret")
    assert env[KEY_ENV] == "s3cret" and env["RLVR_WEIGHT_SYNC_KEY"] == "s3cret"
    assert "VLLM_API_KEY" not in env and KEY_FILE_ENV not in env
    assert env["RLVR_WEIGHTS_ROOT"] == str((tmp_path / "weight_updates").resolve())


def test_a_started_server_holds_its_key_in_its_environment_and_nowhere_in_its_argv(tmp_path):
    """What `ps` shows of a server (its argv) and its log never hold the key."""
    script = ("import os, sys, time; print('started', flush=True); "
              "open(sys.argv[1], 'w').write(os.environ.get('RLVR_SERVER_KEY', '')); "
              "time.sleep(60)")
    seen = tmp_path / "env_key"
    server = ServerProcess(ServerSettings(model="m"), log_path=tmp_path / "server.log",
                           command=lambda s: [sys.executable, "-c", script, str(seen)])
    try:
        server.launch()
        for _ in range(100):
            if seen.exists() and seen.read_text():
                break
            import time
            time.sleep(0.05)
        cmdline = open(f"/proc/{server.process.pid}/cmdline", "rb").read()
        assert seen.read_text() == server.key and len(server.key) >= 40
        assert server.key.encode() not in cmdline
    finally:
        server.stop()
    assert server.key not in (tmp_path / "server.log").read_text()
