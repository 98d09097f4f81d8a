"""Inference servers as Ray actors (`distributed.launcher=ray`, `rollout.engine=remote`): each
actor starts its server and answers its address; stopping the group stops every server, and a
killed actor takes its server with it. Fake servers stand in for vLLM."""

from __future__ import annotations

import sys
import time
from pathlib import Path

from rlvr.config import load_config
from rlvr.launch.ray_servers import RayServers
from rlvr.serving.auth import read_key_file
from rlvr.serving.server import is_healthy

FAKE = str(Path(__file__).resolve().parents[1] / "serving" / "fake_server.py")


def fake_command(settings, python=sys.executable):
    return [python, FAKE, "--port", str(settings.port), "--host", settings.host]


def _gone(address: str, key: str, within_s: float = 30.0) -> bool:
    deadline = time.monotonic() + within_s
    while time.monotonic() < deadline:
        if not is_healthy(address, 1.0, key=key):
            return True
        time.sleep(0.2)
    return False


def test_server_actors_start_answer_and_stop_with_the_group(ray_session, tmp_path):
    cfg = load_config("configs/tiny.yaml", ["rollout.engine=remote", "rollout.num_servers=2",
                                            "distributed.launcher=ray",
                                            f"experiment.output_dir={tmp_path}"])
    servers = RayServers(cfg, "unused-model-dir", tmp_path, command=fake_command)
    with servers:
        addresses, key = list(servers.addresses), servers.key
        assert read_key_file(tmp_path / "server.key") == key  # where the trainer reads it
        assert len(addresses) == 2 and all(is_healthy(a, 5.0, key=key) for a in addresses)
        assert not any(is_healthy(a, 5.0) for a in addresses)  # nothing answers without it
        ray_session.kill(servers.actors[0])  # a dead actor's server dies with it
        assert _gone(addresses[0], key)
        assert is_healthy(addresses[1], 5.0, key=key)
    assert _gone(addresses[1], key)
