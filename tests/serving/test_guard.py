"""The server's door (`ServerGuard`) in front of a stand-in app: no route answers a request
that is not signed with the run's key, the control routes included (vLLM's own `--api-key` guards only /v1, /v2,
/inference); `/collective_rpc` runs only rlvr's methods, and reloads only from the run's
weights directory. The same door in front of the real vLLM server: test_server_trust.py."""

from __future__ import annotations

import asyncio
import json

import httpx
import pytest

from rlvr.serving.client import SignedRequests
from rlvr.serving.guard import MAX_RPC_BODY_BYTES, ServerGuard, checked_weights_dir
from rlvr.serving.signing import sign_request

KEY = "the-runs-key-0123456789"
# Every route a trainer uses, the control routes that answered anyone, and a few more.
ROUTES = [("GET", "/health"), ("GET", "/metrics"), ("GET", "/weight_info"),
          ("GET", "/v1/models"), ("POST", "/inference/v1/generate"), ("POST", "/pause"),
          ("POST", "/resume"), ("POST", "/update_weight_version"),
          ("POST", "/reset_prefix_cache"), ("POST", "/collective_rpc"), ("POST", "/sleep"),
          ("GET", "/server_info"), ("OPTIONS", "/v1/completions"), ("POST", "/root/pause")]


class App:
    """The app behind the door: records what reaches it, with the body it read."""

    def __init__(self):
        self.seen: list[tuple[str, bytes]] = []

    async def __call__(self, scope, receive, send):
        body, more = b"", True
        while more:
            message = await receive()
            body += message.get("body", b"")
            more = message.get("more_body", False)
        self.seen.append((scope["path"], body))
        await send({"type": "http.response.start", "status": 200, "headers": []})
        await send({"type": "http.response.body", "body": b"ok"})


def _requests(guard, calls, key: str | None = None):
    """[(method, path, headers, body)] through the door, signed with `key` for the door's name
    (none given: "server", the Host header) if one is given; their status codes."""
    async def run():
        async with httpx.AsyncClient(transport=httpx.ASGITransport(app=guard),
                                     auth=SignedRequests(key, "server") if key else None,
                                     base_url="http://server") as client:
            return [(await client.request(m, p, headers=h, content=b)).status_code
                    for m, p, h, b in calls]

    return asyncio.run(run())


def _rpc(method, args=(), kwargs=None) -> bytes:
    return json.dumps({"method": method, "args": list(args), "kwargs": kwargs or {}}).encode()


@pytest.fixture
def weights(tmp_path):
    """(run's weights root, a version directory with a safetensors file in it)."""
    root = tmp_path / "run" / "weight_updates"
    version = root / "v1"
    version.mkdir(parents=True)
    (version / "model.safetensors").write_bytes(b"x" * 16)
    return root, version


def test_no_route_answers_unsigned_or_signed_with_a_wrong_key(weights):
    app = App()
    guard = ServerGuard(app, key=KEY, weights_root=str(weights[0]))
    wrong = [{}, {"Authorization": f"Bearer {KEY}"}, {"Authorization": KEY},  # a bearer key
             {"X-Api-Key": KEY}, sign_request("not-the-key", "GET", "/health", "server")]
    calls = [(m, p, h, b"{}") for m, p in ROUTES for h in wrong]
    assert set(_requests(guard, calls)) == {401}
    assert app.seen == []  # nothing reached vLLM
    ok = _requests(guard, [(m, p, {}, b"{}") for m, p in ROUTES if p != "/collective_rpc"],
                   key=KEY)  # each answer checked for the door's signature, too
    assert set(ok) == {200} and len(app.seen) == len(ROUTES) - 1


def test_collective_rpc_runs_only_rlvrs_methods_with_checked_paths(weights, tmp_path):
    root, version = weights
    app = App()
    guard = ServerGuard(app, key=KEY, weights_root=str(root))
    outside = tmp_path / "elsewhere"
    outside.mkdir()
    (outside / "model.safetensors").write_bytes(b"x" * 16)
    (root / "escape").symlink_to(outside)
    head: dict[str, str] = {}
    refused = [_rpc("reload_weights", kwargs={"weights_path": str(version)}),  # vLLM's own
               _rpc("save_sharded_state", [str(tmp_path)]), _rpc("__init__"), b"not json",
               json.dumps({"method": ["weight_dtype"]}).encode(),
               json.dumps({"method": "weight_dtype", "args": "x"}).encode(),
               b"[1, 2]", _rpc("reload_weights_from", [str(outside)]),
               _rpc("reload_weights_from", [str(root / "escape")]),
               _rpc("reload_weights_from", [f"{version}/../../../elsewhere"]),
               _rpc("reload_weights_from", ["weight_updates/v1"]),
               _rpc("reload_weights_from", [str(root)]),
               _rpc("reload_weights_from", [str(root / "missing")])]
    assert _requests(guard, [("POST", "/collective_rpc", head, b) for b in refused], KEY) \
        == [403] * len(refused)
    allowed = [_rpc("reload_weights_from", [str(version)]),
               _rpc("init_weight_group", ["10.0.0.1", 29500, 1, 2]), _rpc("weight_dtype"),
               _rpc("receive_weights", [3])]
    assert _requests(guard, [("POST", "/collective_rpc", head, b) for b in allowed], KEY) \
        == [200] * len(allowed)
    assert app.seen == [("/collective_rpc", b) for b in allowed]  # the body reaches the app whole


def test_routes_that_load_weights_or_files_by_other_means_are_closed(weights):
    app = App()
    guard = ServerGuard(app, key=KEY, weights_root=str(weights[0]))
    paths = ["/init_weight_transfer_engine", "/update_weights", "/v1/load_lora_adapter",
             "/start_profile", "/update_weights/", "/v1//load_lora_adapter"]
    assert _requests(guard, [("POST", p, {}, b"{}") for p in paths], KEY) == [403] * len(paths)
    assert app.seen == []


def test_an_oversized_rpc_body_is_refused_unread(weights):
    guard = ServerGuard(App(), key=KEY, weights_root=str(weights[0]))
    body = _rpc("weight_dtype", ["x" * MAX_RPC_BODY_BYTES])
    assert _requests(guard, [("POST", "/collective_rpc", {}, body)], KEY) == [413]


def test_a_server_without_a_key_does_not_start(monkeypatch):
    monkeypatch.delenv("RLVR_SERVER_KEY", raising=False)
    monkeypatch.delenv("RLVR_SERVER_KEY_FILE", raising=False)
    with pytest.raises(RuntimeError, match="needs the run's key"):
        ServerGuard(App())


def test_a_websocket_without_the_key_is_closed_before_it_opens():
    sent = []

    async def run():
        async def receive():
            return {"type": "websocket.connect"}

        async def send(message):
            sent.append(message)

        await ServerGuard(App(), key=KEY)({"type": "websocket", "path": "/v1/realtime",
                                           "headers": []}, receive, send)

    asyncio.run(run())
    assert sent == [{"type": "websocket.close", "code": 1008}]


def test_a_reload_path_is_resolved_and_must_hold_weights(weights, tmp_path):
    root, version = weights
    (root / "alias").symlink_to(version)  # a link inside the root to a directory inside it
    assert checked_weights_dir(str(root / "alias"), str(root)) == str(version.resolve())
    (version / "model.safetensors").unlink()
    (version / "model.safetensors").symlink_to(tmp_path / "secret.safetensors")
    (tmp_path / "secret.safetensors").write_bytes(b"x")
    with pytest.raises(ValueError, match="outside"):
        checked_weights_dir(str(version), str(root))
    with pytest.raises(ValueError, match="without a weights directory"):
        checked_weights_dir(str(version), "")
