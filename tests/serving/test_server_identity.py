"""Who a trainer sends the run's key to. The health check never sends it: it sends a fresh
challenge, and takes a server as up only once the answer proves the key, bound to the server's
name. So a process that listens on a server's port before vLLM does (vLLM binds the port, in its
argv for anyone to read, a minute before it listens) is neither taken for the server nor told
the key, nor is one that relays the challenge to another server of the run. No request goes
through a proxy the environment names, or follows a redirect. Fake servers and stand-in
processes here; the same check against the real vLLM server at the end."""

from __future__ import annotations

import asyncio
import contextlib
import socket
import sys
import threading

import httpx
import pytest

from rlvr.serving.auth import (CHALLENGE_HEADER, NAME_HEADER, PROOF_HEADER, SERVER_NAME_ENV,
                               health_proof, new_challenge, proof_matches)
from rlvr.serving.client import ServerClient, ServerError
from rlvr.serving.guard import ServerGuard, proof_headers
from rlvr.serving.server import (ServerProcess, ServerSettings, ServerStartError, is_healthy,
                                 server_env, server_name)
from rlvr.serving.signing import sign_request
from rlvr.types import SamplingParams
from tests.serving.fake_server import FakeServer

KEY = "the-runs-key-0123456789-abcdefghijklmnop"
OK = b"HTTP/1.1 200 OK\r\nContent-Length: 0\r\nConnection: close\r\n\r\n"


def _read_request(conn: socket.socket) -> bytes:
    """One HTTP request whole: its headers, then the body its Content-Length names (so a
    listener can pass it on, or show everything a client sent)."""
    request = chunk = conn.recv(65536)
    while chunk and b"\r\n\r\n" not in request:  # an empty chunk: the client closed
        request += (chunk := conn.recv(65536))
    head, _, body = request.partition(b"\r\n\r\n")
    length = next((int(line.split(b":", 1)[1]) for line in head.split(b"\r\n")
                   if line.lower().startswith(b"content-length:")), 0)
    while chunk and len(body) < length:
        body += (chunk := conn.recv(65536))
    return head + b"\r\n\r\n" + body


class Listener:
    """A stranger on a port: records the bytes of every request it is sent and answers each
    with `answer(request)`, raw bytes (default: 200 to anything)."""

    def __init__(self, answer=lambda request: OK, port: int = 0):
        self.answer, self.received = answer, []
        self.sock = socket.socket()
        self.sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self.sock.bind(("127.0.0.1", port))
        self.sock.listen(16)
        self.sock.settimeout(0.1)
        self.port = self.sock.getsockname()[1]
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._serve, daemon=True)

    @property
    def address(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def saw(self, secret: str) -> bool:
        return any(secret.encode() in request for request in self.received)

    def _serve(self) -> None:
        while not self._stop.is_set():
            try:
                conn, _ = self.sock.accept()
            except OSError:
                continue
            with conn:
                conn.settimeout(2.0)
                try:
                    self.received.append(_read_request(conn))
                    conn.sendall(self.answer(self.received[-1]))
                except OSError:
                    pass

    def __enter__(self) -> "Listener":
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self._stop.set()
        self._thread.join(timeout=5)
        self.sock.close()


def relay_to(address: str):
    """A squatter's answer: the request passed on, as it came, to another server of the run,
    and that server's answer passed back."""
    host, port = address.removeprefix("http://").split(":")

    def answer(request: bytes) -> bytes:
        with socket.create_connection((host, int(port)), timeout=5) as upstream:
            upstream.sendall(request.replace(b"Connection: keep-alive", b"Connection: close"))
            chunks = []
            while chunk := upstream.recv(65536):
                chunks.append(chunk)
        return b"".join(chunks)

    return answer


def waiting_server(port: int) -> ServerProcess:
    """A server that was told `port` and is still building its engine (a process that sleeps):
    only a squatter answers on its port."""
    return ServerProcess(ServerSettings(model="m", port=port), key=KEY,
                         command=lambda s: [sys.executable, "-c", "import time; time.sleep(60)"])


# ---- proxies and redirects -------------------------------------------------------------------

@pytest.fixture
def proxy(monkeypatch):
    """A proxy every variable of the environment names, recording what it is sent."""
    with Listener(lambda r: b"HTTP/1.1 502 Bad Gateway\r\nContent-Length: 0\r\n\r\n") as p:
        for name in ("http_proxy", "HTTP_PROXY", "https_proxy", "HTTPS_PROXY", "ALL_PROXY",
                     "all_proxy"):
            monkeypatch.setenv(name, p.address)
        for name in ("no_proxy", "NO_PROXY"):
            monkeypatch.delenv(name, raising=False)
        yield p


def test_the_health_check_goes_through_no_proxy_the_environment_names(proxy):
    with _running(FakeServer(key=KEY)) as server:
        assert is_healthy(server.address, key=KEY, name=server.name)
        assert not is_healthy("http://127.0.0.1:1", key=KEY)  # nobody there: refused, not sent on
    assert proxy.received == []


def test_the_clients_requests_go_through_no_proxy_the_environment_names(proxy):
    with _running(FakeServer(key=KEY)) as server:
        client, out = ServerClient(server.address, key=KEY), []
        try:
            healthy = client.healthy()
            # Through a proxy, each would fail on its 502; what the proxy was sent is the point.
            with contextlib.suppress(ServerError):
                client.pause("wait")
            with contextlib.suppress(ServerError):
                client.resume()
            with contextlib.suppress(ServerError):
                out = asyncio.run(_generate_and_close(client))
        finally:
            client.close()
        assert proxy.received == []
        assert healthy and len(out) == 1 and server.posted("/pause") and server.posted("/resume")


async def _generate_and_close(client: ServerClient):
    try:
        return await client.generate([1, 2, 3], SamplingParams(n=1, max_tokens=2), seed=1)
    finally:
        await client.aclose()


def test_a_health_check_follows_no_redirect():
    with Listener() as elsewhere:
        moved = (f"HTTP/1.1 307 Temporary Redirect\r\nLocation: {elsewhere.address}/health\r\n"
                 "Content-Length: 0\r\nConnection: close\r\n\r\n").encode()
        with Listener(lambda r: moved) as redirector:
            assert not is_healthy(redirector.address, key=KEY)
            assert not is_healthy(redirector.address)
            assert len(redirector.received) == 2 and not redirector.saw(KEY)
        assert elsewhere.received == []


# ---- a squatter on the port ------------------------------------------------------------------

def test_a_squatter_answering_health_is_not_the_server_and_never_gets_the_key():
    with Listener() as squatter:
        assert not is_healthy(squatter.address, key=KEY)
        server = waiting_server(squatter.port)
        with pytest.raises(ServerStartError, match="not healthy"):
            server.start(timeout_s=2.0)
        assert not server.alive()  # stopped again
        assert len(squatter.received) >= 2 and not squatter.saw(KEY)
        assert all(b"authorization" not in r.lower() for r in squatter.received)


def test_a_squatter_relaying_to_another_server_of_the_run_does_not_pass():
    with _running(FakeServer(key=KEY)) as sibling, Listener(relay_to(sibling.address)) as relay:
        assert is_healthy(sibling.address, key=KEY, name=sibling.name)
        # The sibling's proof is good, but for the sibling's name, not the port asked.
        assert not is_healthy(relay.address, key=KEY, name=server_name(relay.address))
        with pytest.raises(ServerStartError, match="not healthy"):
            waiting_server(relay.port).start(timeout_s=2.0)
        assert relay.received and not relay.saw(KEY)
        # Unpinned (a name of its own, as through a forwarded port), a relay's proof passes:
        # why `ServerProcess` pins its server's name.
        assert is_healthy(relay.address, key=KEY)


def test_an_answer_without_the_right_proof_is_not_healthy():
    def forged(request: bytes) -> bytes:
        challenge = _header_of(request, CHALLENGE_HEADER)
        proof = health_proof("a-guessed-key-000000000000000000", "127.0.0.1:1", challenge)
        return (f"HTTP/1.1 200 OK\r\n{PROOF_HEADER}: {proof}\r\n{NAME_HEADER}: 127.0.0.1:1\r\n"
                "Content-Length: 0\r\nConnection: close\r\n\r\n").encode()

    with Listener(forged) as stranger:
        assert not is_healthy(stranger.address, key=KEY)
    with _running(FakeServer(key=KEY)) as server:
        assert not is_healthy(server.address, key="not-the-runs-key-0000000000")
        assert not is_healthy(server.address)  # no key, no challenge: 401
        assert is_healthy(server.address, key=KEY, name=server.name)


def _header_of(request: bytes, name: str) -> str:
    for line in request.decode("latin-1").split("\r\n"):
        field, _, value = line.partition(":")
        if field.strip().lower() == name:
            return value.strip()
    return ""


# ---- the door answers the challenge ----------------------------------------------------------

class App:
    """vLLM behind the door: records the routes that reach it, answers 200."""

    def __init__(self):
        self.seen: list[str] = []

    async def __call__(self, scope, receive, send):
        self.seen.append(scope["path"])
        await send({"type": "http.response.start", "status": 200, "headers": []})
        await send({"type": "http.response.body", "body": b""})


def _through(guard, method: str, path: str, headers: dict[str, str]) -> httpx.Response:
    async def run():
        async with httpx.AsyncClient(transport=httpx.ASGITransport(app=guard),
                                     base_url="http://server") as client:
            return await client.request(method, path, headers=headers)

    return asyncio.run(run())


def test_the_door_answers_a_keyless_health_challenge_with_a_proof_bound_to_its_name():
    app = App()
    guard = ServerGuard(app, key=KEY, weights_root="", name="10.0.0.5:8100")
    challenge = new_challenge()
    r = _through(guard, "GET", "/health", {CHALLENGE_HEADER: challenge})
    assert r.status_code == 200 and app.seen == ["/health"]  # vLLM's own health answer
    assert r.headers[NAME_HEADER] == "10.0.0.5:8100"
    assert proof_matches(r.headers[PROOF_HEADER], KEY, "10.0.0.5:8100", challenge)
    assert not proof_matches(r.headers[PROOF_HEADER], KEY, "10.0.0.5:8101", challenge)
    assert not proof_matches(r.headers[PROOF_HEADER], KEY, "10.0.0.5:8100", new_challenge())
    # A signed /health answers as usual, without a proof unless challenged.
    r = _through(guard, "GET", "/health", sign_request(KEY, "GET", "/health", "10.0.0.5:8100"))
    assert r.status_code == 200 and PROOF_HEADER not in r.headers


@pytest.mark.parametrize("method, path, challenge", [
    ("GET", "/metrics", None), ("POST", "/pause", None), ("GET", "/v1/models", None),
    ("POST", "/health", None), ("GET", "/health", "short"), ("GET", "/health", "x" * 129),
    ("GET", "/health", "not url safe; at all here ok"), ("GET", "/health", "")])
def test_a_challenge_opens_no_other_route_and_a_malformed_one_opens_nothing(method, path,
                                                                           challenge):
    app = App()
    guard = ServerGuard(app, key=KEY, weights_root="", name="n")
    r = _through(guard, method, path, {CHALLENGE_HEADER: new_challenge()
                                       if challenge is None else challenge})
    assert r.status_code == 401 and PROOF_HEADER not in r.headers and app.seen == []


def test_the_fake_server_answers_the_challenge_as_the_door_does():
    challenge = new_challenge()
    with _running(FakeServer(key=KEY, name="node-a:8100")) as server:
        r = httpx.get(f"{server.address}/health", headers={CHALLENGE_HEADER: challenge},
                      trust_env=False)
        guard = _through(ServerGuard(App(), key=KEY, weights_root="", name="node-a:8100"),
                         "GET", "/health", {CHALLENGE_HEADER: challenge})
    expected = dict(proof_headers(KEY, "node-a:8100", challenge))
    assert r.status_code == guard.status_code == 200
    for name, value in expected.items():
        assert r.headers[name] == guard.headers[name] == value


def test_a_server_is_told_its_name_and_a_users_name_does_not_win():
    settings = ServerSettings(model="m", host="0.0.0.0", port=8123)
    env = server_env(settings, base={SERVER_NAME_ENV: "elsewhere:1"}, key=KEY)
    assert env[SERVER_NAME_ENV] == "127.0.0.1:8123"
    assert ServerProcess(settings, key=KEY).name == "127.0.0.1:8123"
    assert server_name("http://10.0.0.5:8100") == "10.0.0.5:8100"


# ---- the real server -------------------------------------------------------------------------

def test_the_real_server_proves_the_key_under_its_name(vllm_server, vllm_run):
    address, _ = vllm_server  # `rlvr serve` itself became healthy only through the proof
    assert is_healthy(address, 60.0, key=vllm_run.key, name=server_name(address))
    assert not is_healthy(address, 60.0, key=vllm_run.key, name="127.0.0.1:1")
    assert not is_healthy(address, 60.0, key="not-the-runs-key-0000000000")
    assert not is_healthy(address, 60.0)


class _running:
    """A fake server started for a `with` block and stopped after it."""

    def __init__(self, server: FakeServer):
        self.server = server

    def __enter__(self) -> FakeServer:
        return self.server.start()

    def __exit__(self, *exc) -> None:
        self.server.stop()
