"""A server actor's server (`distributed.launcher=ray`) binds its node's address, not every
interface, and demands the run's key; run here without Ray, the actor's body as a plain
object, a fake server standing in for vLLM. (With Ray: tests/distributed/test_ray_servers.py.)"""

from __future__ import annotations

import sys
from pathlib import Path

import rlvr.distributed.ray_session as ray_session
from rlvr.launch.ray_servers import ServerActorBody
from rlvr.serving.server import ServerSettings, is_healthy

FAKE = str(Path(__file__).resolve().parents[1] / "serving" / "fake_server.py")


def test_a_server_actor_binds_its_nodes_address_and_wants_the_key(tmp_path, monkeypatch):
    monkeypatch.setattr(ray_session, "node_ip", lambda: "127.0.0.1")  # the node, as Ray says
    commands = []

    def command(settings, python=sys.executable):
        commands.append(settings)
        return [python, FAKE, "--port", str(settings.port), "--host", settings.host]

    body = ServerActorBody(ServerSettings(model="unused"), str(tmp_path / "server.log"), 30.0,
                           command, key="the-runs-key-0123456789")
    try:
        assert [s.host for s in commands] == ["127.0.0.1"]  # not 0.0.0.0
        address = body.address()
        assert address == f"http://127.0.0.1:{commands[0].port}"
        assert is_healthy(address, 5.0, key="the-runs-key-0123456789")
        assert not is_healthy(address, 5.0) and not is_healthy(address, 5.0, key="wrong")
    finally:
        body.stop()
