"""Requests signed, not a bearer key: whoever takes a server's port learns nothing it can
reuse, and cannot answer in the server's name. A client signs each request (method, target,
server name, time, nonce, body digest); a server refuses a stale, replayed, tampered or
misaddressed one, and signs its answer, which the client checks. Against the door
(`ServerGuard`, as vLLM runs it), the fake server (the door's own check) and a squatter that
records every byte it is sent (`Listener`)."""

from __future__ import annotations

import asyncio
import contextlib
import socket
import time

import httpx
import pytest

from rlvr.serving.client import ServerClient, ServerError, SignedRequests
from rlvr.serving.guard import ServerGuard
from rlvr.serving.signing import (ANSWER_SIGNATURE_HEADER, NONCE_HEADER, SIGNATURE_HEADER,
                                  RequestVerifier, SignedRequest, sign_request, sign_response)
from rlvr.types import SamplingParams
from tests.serving.fake_server import FakeServer
from tests.serving.test_server_identity import Listener, relay_to

KEY = "the-runs-key-0123456789-abcdefghijklmnop"
GENERATED = (b'{"choices": [{"index": 0, "token_ids": [7, 7], "text": "7 7", "finish_reason": '
             b'"length", "logprobs": {"content": [{"logprob": 0.0}, {"logprob": 0.0}]}}]}')


def _http(status: str, body: bytes = b"{}", extra: str = "") -> bytes:
    return (f"HTTP/1.1 {status}\r\nContent-Type: application/json\r\n{extra}"
            f"Content-Length: {len(body)}\r\nConnection: close\r\n\r\n").encode() + body


def _send_raw(address: str, request: bytes) -> bytes:
    """`request`'s bytes as they were, to `address`; the answer's bytes."""
    host, port = address.removeprefix("http://").split(":")
    with socket.create_connection((host, int(port)), timeout=5) as conn:
        conn.sendall(request.replace(b"Connection: keep-alive", b"Connection: close"))
        chunks = []
        while chunk := conn.recv(65536):
            chunks.append(chunk)
    return b"".join(chunks)


def _status(answer: bytes) -> int:
    return int(answer.split(b" ", 2)[1])


async def _generate(client: ServerClient):
    try:
        return await client.generate([1, 2, 3], SamplingParams(n=1, max_tokens=2), seed=1)
    finally:
        await client.aclose()


@contextlib.contextmanager
def _serving(server: FakeServer):
    server.start()
    try:
        yield server
    finally:
        with contextlib.suppress(OSError):
            server.stop()


# ---- a squatter on a dead server's port ------------------------------------------------------

def test_a_squatter_on_a_dead_servers_port_learns_nothing_it_can_reuse():
    """The server proved itself and served; it died; a local user took its port. The next
    request goes to the squatter: it must carry no key, its answer must be refused, and the
    request it captured must be refused when replayed to the real server, back on its port."""
    with _serving(FakeServer(key=KEY)) as server:
        client = ServerClient(server.address, key=KEY)
        assert client.healthy()
        client.pause("wait")  # served while it lived
        port, name = int(server.address.rsplit(":", 1)[1]), server.name
    with Listener(port=port) as squatter:  # the port, taken; it answers 200 to anything
        with pytest.raises(ServerError, match="signature"):
            client.resume()
        with pytest.raises(ServerError, match="signature"):
            asyncio.run(_generate(client))
        client.close()
    captured = squatter.received
    assert len(captured) == 2 and not squatter.saw(KEY)
    assert all(b"authorization" not in r.lower() for r in captured)
    with _serving(FakeServer(port=port, key=KEY, name=name)) as back:  # the real one, again
        answers = [_send_raw(back.address, r) for r in captured]
        # Nonces it never saw (it forgot them with its old life), yet refused: signed before it
        # started.
        assert [_status(a) for a in answers] == [401, 401]
        assert back.calls == [] and back.generate_seeds == []


def test_a_request_replayed_to_the_server_that_served_it_is_refused():
    with _serving(FakeServer(key=KEY)) as server, \
            Listener(relay_to(server.address)) as tap:  # passes it on, keeps a copy
        client = ServerClient(tap.address, key=KEY, name=server.name)
        client.pause("keep")
        client.close()
        assert len(server.posted("/pause")) == 1 and not tap.saw(KEY)
        assert _status(_send_raw(server.address, tap.received[0])) == 401  # the same, again
        assert len(server.posted("/pause")) == 1 and server.refused == ["/pause"]


def test_a_request_relayed_to_another_server_of_the_run_is_refused():
    """A squatter on server A's port passes A's request to B, which holds the same key: B
    refuses it (signed for A's name), and the client refuses B's unsigned refusal."""
    with _serving(FakeServer(key=KEY)) as b, Listener(relay_to(b.address)) as squatter_on_a:
        client = ServerClient(squatter_on_a.address, key=KEY)  # signs for A's name
        with pytest.raises(ServerError, match="signature"):
            client.pause("wait")
        client.close()
        assert b.posted("/pause") == [] and b.refused == ["/pause"]


def test_a_body_changed_on_the_way_is_refused():
    def tamper(request: bytes) -> bytes:
        return relay_to(server.address)(request.replace(b'"3"}', b'"9"}'))

    with _serving(FakeServer(key=KEY)) as server, Listener(tamper) as squatter:
        client = ServerClient(squatter.address, key=KEY, name=server.name)
        with pytest.raises(ServerError, match="signature"):
            client.set_version(3)
        client.close()
        assert server.posted("/update_weight_version") == [] and server.version == "default"


# ---- answers that do not come from the key's holder ------------------------------------------

def test_the_client_refuses_an_answer_not_signed_for_its_request():
    """A squatter that answers a well-formed generation: unsigned, signed with another key,
    or carrying a signature the real server gave to another request (replayed): each refused."""
    old = sign_response(KEY, "127.0.0.1:1", "an-earlier-requests-nonce-0000", 200, GENERATED)
    forged = [_http("200 OK", GENERATED),
              _http("200 OK", GENERATED, f"{ANSWER_SIGNATURE_HEADER}: {'0' * 64}\r\n"),
              _http("200 OK", GENERATED, f"{ANSWER_SIGNATURE_HEADER}: {old}\r\n")]
    for answer in forged:
        with Listener(lambda r, a=answer: a) as squatter:
            client = ServerClient(squatter.address, key=KEY)
            with pytest.raises(ServerError, match="signature"):
                asyncio.run(_generate(client))
            with pytest.raises(ServerError, match="signature"):
                client.weight_version()
            client.close()


def test_the_client_refuses_a_real_answer_whose_status_or_body_was_changed():
    with _serving(FakeServer(key=KEY)) as server:
        def relabel(request: bytes) -> bytes:  # the server's answer, its body rewritten
            answer = relay_to(server.address)(request)
            return answer.replace(b'"weight_version": "default"', b'"weight_version": "1234567"')

        with Listener(relabel) as squatter:
            client = ServerClient(squatter.address, key=KEY, name=server.name)
            with pytest.raises(ServerError, match="signature"):
                client.weight_version()
            client.close()
        client = ServerClient(server.address, key=KEY)
        assert client.weight_version() == 0  # the same request, straight: signed and taken
        client.close()


# ---- the door --------------------------------------------------------------------------------

class App:
    """vLLM behind the door: echoes the body it read, streamed back in `chunks` pieces."""

    def __init__(self, chunks: int = 1):
        self.seen: list[bytes] = []
        self.chunks = chunks

    async def __call__(self, scope, receive, send):
        body, more = b"", True
        while more:
            message = await receive()
            body += message.get("body", b"")
            more = message.get("more_body", False)
        self.seen.append(body)
        answer = body or b"ok"
        await send({"type": "http.response.start", "status": 200,
                    "headers": [(b"content-type", b"text/event-stream")]})
        step = max(1, len(answer) // self.chunks)
        pieces = [answer[i:i + step] for i in range(0, len(answer), step)]
        for i, piece in enumerate(pieces):
            await send({"type": "http.response.body", "body": piece,
                        "more_body": i < len(pieces) - 1})


def _through(guard, method: str, path: str, headers=None, content=None, key=None,
             name: str = "server") -> httpx.Response:
    async def run():
        async with httpx.AsyncClient(transport=httpx.ASGITransport(app=guard),
                                     auth=SignedRequests(key, name) if key else None,
                                     base_url="http://server") as client:
            return await client.request(method, path, headers=headers, content=content)

    return asyncio.run(run())


def test_the_door_refuses_stale_future_replayed_and_misaddressed_requests():
    app = App()
    guard = ServerGuard(app, key=KEY, weights_root="", name="10.0.0.5:8100")
    now = time.time()
    for headers in (sign_request(KEY, "POST", "/pause", "10.0.0.5:8100", now=now - 120),
                    sign_request(KEY, "POST", "/pause", "10.0.0.5:8100", now=now + 120),
                    sign_request(KEY, "POST", "/pause", "10.0.0.5:8101"),  # another server
                    sign_request(KEY, "GET", "/pause", "10.0.0.5:8100"),  # another method
                    sign_request(KEY, "POST", "/resume", "10.0.0.5:8100"),  # another route
                    sign_request(KEY, "POST", "/pause?mode=keep", "10.0.0.5:8100")):
        r = _through(guard, "POST", "/pause", headers)
        assert r.status_code == 401 and ANSWER_SIGNATURE_HEADER not in r.headers
    assert app.seen == []
    fresh = sign_request(KEY, "POST", "/pause", "10.0.0.5:8100")
    first, again = (_through(guard, "POST", "/pause", fresh) for _ in range(2))
    assert first.status_code == 200 and again.status_code == 401 and "replayed" in again.text
    assert len(app.seen) == 1


def test_the_door_checks_the_body_it_was_sent_and_signs_what_it_answers():
    app = App(chunks=50)  # a streamed answer: held whole, then signed
    guard = ServerGuard(app, key=KEY, weights_root="")
    big = b"[" + b"1," * 2_000_000 + b"1]"  # a long prompt's worth of JSON, 4 MB

    async def streamed():  # a request body sent in pieces: the digest is of what was sent
        for i in range(0, len(big), 1 << 20):
            yield big[i:i + (1 << 20)]

    for content in (big, streamed()):
        r = _through(guard, "POST", "/inference/v1/generate", content=content, key=KEY)
        assert r.status_code == 200 and r.content == big and app.seen[-1] == big
    headers = sign_request(KEY, "POST", "/inference/v1/generate", "server", b"[1]")
    r = _through(guard, "POST", "/inference/v1/generate", headers, content=b"[2]")
    assert r.status_code == 401 and len(app.seen) == 2  # not the body signed


def test_the_nonce_cache_is_bounded_and_forgets_only_what_the_window_refuses():
    clock = [1000.0]
    verifier = RequestVerifier(KEY, "n", window_s=60, max_nonces=2, clock=lambda: clock[0])

    def check(headers):
        return verifier.check("GET", "/health", "", headers)

    requests = [sign_request(KEY, "GET", "/health", "n", now=clock[0]) for _ in range(3)]
    assert isinstance(check(requests[0]), SignedRequest)
    assert isinstance(check(requests[1]), SignedRequest)
    assert check(requests[2])[0] == 503  # full: refused, nothing forgotten
    assert check(requests[0])[0] == 401  # still remembered
    clock[0] += 61  # the first two are now stale, so no longer remembered, nor needed
    assert check(requests[0])[0] == 401 and "stale" in check(requests[0])[1]
    assert isinstance(check(sign_request(KEY, "GET", "/health", "n", now=clock[0])),
                      SignedRequest)


def test_the_signature_headers_hold_nothing_reusable_elsewhere():
    """What a squatter sees: a time, a nonce, a digest and a MAC; none of them is the key,
    and the MAC is of one request to one server."""
    headers = sign_request(KEY, "POST", "/pause?mode=wait", "10.0.0.5:8100", b"")
    assert KEY not in "".join(headers.values()) and len(headers[NONCE_HEADER]) >= 43
    assert headers[SIGNATURE_HEADER] != sign_request(
        KEY, "POST", "/pause?mode=wait", "10.0.0.5:8100", b"",
        nonce=headers[NONCE_HEADER], now=int(headers["x-rlvr-time"]) / 1000 + 1)[SIGNATURE_HEADER]


def test_an_app_that_fails_is_answered_with_a_signed_error():
    """vLLM answers a route's exception from outside the door (its handler for errors sits in
    the outermost middleware), unsigned; the door answers it signed instead, with the error."""
    async def failing(scope, receive, send):
        raise RuntimeError("the worker failed")

    async def run():
        async with httpx.AsyncClient(transport=httpx.ASGITransport(app=ServerGuard(
                failing, key=KEY, weights_root=""), raise_app_exceptions=False),
                auth=SignedRequests(KEY, "server"), base_url="http://server") as client:
            return await client.post("/collective_rpc", content=b'{"method": "weight_dtype"}')

    r = asyncio.run(run())  # signed, or SignedRequests would have raised
    assert r.status_code == 500 and "the worker failed" in r.text
