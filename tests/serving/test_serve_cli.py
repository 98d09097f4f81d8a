"""`rlvr serve` and its key: without one it refuses any address but loopback, and on loopback
it makes a fresh key (0600, in the run's directory) rather than serve an open door; with one
(from the environment) it hands it to the server, whose command line never holds it."""

from __future__ import annotations

import stat

import pytest

import rlvr.serving as serving
from rlvr.cli import main
from rlvr.serving.auth import KEY_ENV, KEY_FILE_ENV, read_key_file, write_key_file


MODEL = ""  # the tiny model's directory, set by the fixture


class Started(Exception):
    """A server would have started."""


@pytest.fixture
def started(monkeypatch, tiny_model_dir):
    """Captures the ServerProcess `rlvr serve` builds instead of starting vLLM."""
    monkeypatch.setattr("tests.serving.test_serve_cli.MODEL", tiny_model_dir)
    monkeypatch.delenv(KEY_ENV, raising=False)
    monkeypatch.delenv(KEY_FILE_ENV, raising=False)
    made = []

    def start(self, timeout_s=300.0):
        made.append(self)
        raise Started()

    monkeypatch.setattr(serving.ServerProcess, "start", start)
    return made


def _serve(tmp_path, *args: str) -> int:
    try:
        return main(["serve", MODEL, f"experiment.output_dir={tmp_path}", "--port", "0", *args])
    except Started:
        return -1


@pytest.mark.parametrize("host", ["0.0.0.0", "192.0.2.2", "::"])
def test_without_a_key_a_non_loopback_address_is_refused(host, tmp_path, started, capsys):
    assert _serve(tmp_path, "--host", host) == 2
    assert started == [] and "needs a key" in capsys.readouterr().err


def test_without_a_key_loopback_gets_a_fresh_private_key(tmp_path, started, capsys):
    assert _serve(tmp_path) == -1
    key_file = tmp_path / "server.key"
    assert stat.S_IMODE(key_file.stat().st_mode) == 0o600
    (server,) = started
    assert server.key == read_key_file(key_file) and server.settings.host == "127.0.0.1"
    assert server.key not in capsys.readouterr().out  # the file's path is printed, not the key
    assert server.settings.weights_dir == str((tmp_path / "weight_updates").resolve())


def test_a_key_from_the_environment_lets_it_bind_the_clusters_address(tmp_path, started,
                                                                     monkeypatch):
    key_file = write_key_file(tmp_path / "cluster.key", "the-runs-key-0123456789")
    monkeypatch.setenv(KEY_FILE_ENV, str(key_file))
    assert _serve(tmp_path / "run", "--host", "192.0.2.2") == -1
    (server,) = started
    assert server.key == "the-runs-key-0123456789" and server.settings.host == "192.0.2.2"
    assert not (tmp_path / "run" / "server.key").exists()  # no second key made


def test_a_key_file_others_can_read_is_refused(tmp_path, started, monkeypatch, capsys):
    key_file = write_key_file(tmp_path / "cluster.key", "the-runs-key-0123456789")
    key_file.chmod(0o640)
    monkeypatch.setenv(KEY_FILE_ENV, str(key_file))
    assert _serve(tmp_path / "run") == 2
    assert started == [] and "chmod 600" in capsys.readouterr().err
