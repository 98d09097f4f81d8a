"""Signed requests and signed answers between rlvr's clients and its servers: the run's key
never travels.

What it is: the one implementation both sides use. A client signs each request
(`sign_request`): an HMAC-SHA256 under the run's key over the method, the request target (path
and query, as sent), the name of the server it is meant for, a timestamp, a fresh nonce and the
SHA-256 of the body as sent. A server checks it (`RequestVerifier.check`): the MAC, its own
name, the timestamp within `WINDOW_S` of its clock, and a nonce it has not seen (a bounded
cache, `MAX_NONCES`); then the body's digest once it has read the body (`body_digest`). The
server signs its answer (`sign_response`): an HMAC over the request's nonce, the status and
the SHA-256 of the answer's body, which the client checks (`response_signed`) before it reads
a byte of the answer. So a process on a server's port (one that took a dead server's port)
receives only MACs bound to one server, one moment and one nonce: replayed to the real server,
or to another server of the run, they are refused, and it cannot answer in the server's name.
What it is not: a transport (`rlvr.serving.client` signs with `SignedRequests`, an httpx auth;
`rlvr.serving.guard` checks in front of vLLM), encryption (bodies travel in clear), or the
health challenge (`rlvr.serving.auth.health_proof`), which needs no key from the client and
tells a client the name a server proves.

Why our own few lines and no library: what is signed is rlvr's own choice of fields, and
`hmac`/`hashlib` are the whole of it. Each MAC starts with its purpose, so none can stand for
another MAC under the run's key (the health proof's, the weight plan's). The fields are joined
as a JSON list, so no field can end early and pass its tail to the next.
"""

from __future__ import annotations

import hashlib
import heapq
import hmac
import json
import re
import secrets
import threading
import time
from dataclasses import dataclass
from typing import Callable, Mapping

TIME_HEADER = "x-rlvr-time"  # the client's clock, milliseconds since the epoch
NONCE_HEADER = "x-rlvr-nonce"  # 32 random bytes, URL-safe text; never used twice
BODY_HEADER = "x-rlvr-body-sha256"  # hex SHA-256 of the body as sent (b"" when none)
SIGNATURE_HEADER = "x-rlvr-signature"  # the request's MAC
ANSWER_SIGNATURE_HEADER = "x-rlvr-answer-signature"  # the server's MAC over its answer
SIGNED_HEADERS = (TIME_HEADER, NONCE_HEADER, BODY_HEADER, SIGNATURE_HEADER)

# How far a request's time may be from the server's clock, either way. Clocks of a cluster
# agree to well under this (NTP); a captured request is refused once it is older.
WINDOW_S = 60
# The nonces a server remembers: each is kept until its time leaves the window (at most
# 2 * WINDOW_S), so this bounds memory (~40 MB) and allows ~2,000 requests a second; past it a
# server answers 503 rather than forget a nonce that could then be replayed.
MAX_NONCES = 262_144
EMPTY_BODY_DIGEST = hashlib.sha256(b"").hexdigest()

_REQUEST_PURPOSE = "rlvr request v1"
_ANSWER_PURPOSE = "rlvr answer v1"
_NONCE = re.compile(r"[A-Za-z0-9_-]{22,128}")
_DIGEST = re.compile(r"[0-9a-f]{64}")
_TIME = re.compile(r"[0-9]{1,15}")


def body_digest(body: bytes) -> str:
    """Hex SHA-256 of `body`, exactly the bytes sent."""
    return hashlib.sha256(body).hexdigest()


def _mac(key: str, fields: list[str | int]) -> str:
    message = json.dumps(fields, ensure_ascii=True, separators=(",", ":")).encode()
    return hmac.new(key.encode(), message, hashlib.sha256).hexdigest()


def request_mac(key: str, method: str, target: str, name: str, time_ms: int, nonce: str,
                digest: str) -> str:
    """The MAC a request carries (`SIGNATURE_HEADER`)."""
    return _mac(key, [_REQUEST_PURPOSE, method.upper(), target, name, time_ms, nonce, digest])


def sign_request(key: str, method: str, target: str, name: str, body: bytes = b"",
                 now: float | None = None, nonce: str | None = None) -> dict[str, str]:
    """The headers that sign one request to the server `name` ("host:port"): `target` is the
    path with its query as the request line carries it, `body` the bytes sent."""
    time_ms = int((time.time() if now is None else now) * 1000)
    nonce = nonce or secrets.token_urlsafe(32)
    digest = body_digest(body)
    return {TIME_HEADER: str(time_ms), NONCE_HEADER: nonce, BODY_HEADER: digest,
            SIGNATURE_HEADER: request_mac(key, method, target, name, time_ms, nonce, digest)}


def answer_mac(key: str, name: str, nonce: str, status: int, digest: str) -> str:
    return _mac(key, [_ANSWER_PURPOSE, name, nonce, int(status), digest])


def sign_response(key: str, name: str, nonce: str, status: int, body: bytes) -> str:
    """The server's signature of its answer to the request that carried `nonce`."""
    return answer_mac(key, name, nonce, status, body_digest(body))


def response_signed(key: str, name: str, nonce: str, status: int, body: bytes,
                    signature: str | None) -> bool:
    """True if `signature` is the server `name`'s, holding `key`, over this answer (its
    status and body) to the request that carried `nonce`; constant time."""
    if not signature:
        return False
    return hmac.compare_digest(signature.strip().encode("latin-1", errors="replace"),
                               sign_response(key, name, nonce, status, body).encode())


@dataclass(frozen=True)
class SignedRequest:
    """What a request's signature headers say, once they are well-formed."""

    time_ms: int
    nonce: str
    digest: str  # the body's SHA-256 the client signed; the body must match it
    signature: str


def signed_fields(headers: Mapping[str, str | None]) -> SignedRequest | None:
    """The signature headers of a request (lower-case names), or None if any is missing or
    malformed."""
    time_ms, nonce, digest, signature = (headers.get(h) or "" for h in SIGNED_HEADERS)
    if not (_TIME.fullmatch(time_ms) and _NONCE.fullmatch(nonce) and _DIGEST.fullmatch(digest)
            and _DIGEST.fullmatch(signature)):
        return None
    return SignedRequest(int(time_ms), nonce, digest, signature)


class RequestVerifier:
    """A server's check of signed requests: MAC, its name, freshness, first use of a nonce.
    Thread-safe. `name` is the server's ("host:port" it was started to answer at); "" takes
    the name from each request's Host header (a server started without one).

    Nonces live in memory, so a server started again on the same port (same name, same key)
    has forgotten them: it refuses every request signed before it started (`started`), which
    a request captured while it was down always is."""

    def __init__(self, key: str, name: str = "", window_s: int = WINDOW_S,
                 max_nonces: int = MAX_NONCES, clock: Callable[[], float] = time.time):
        self._key, self.name = key, name
        self._window, self._max, self._clock = window_s, max_nonces, clock
        self.started = clock()
        self._seen: set[str] = set()
        self._expiry: list[tuple[float, str]] = []  # a heap: when each seen nonce may go
        self._lock = threading.Lock()

    def check(self, method: str, target: str, host: str,
              headers: Mapping[str, str | None]) -> tuple[int, str] | SignedRequest:
        """The request's signed fields if it may be served, else (status, why): 401 for a
        missing, wrong, stale or replayed signature, 503 when the nonce cache is full. The
        body is checked after, against `SignedRequest.digest` (`body_digest`)."""
        signed = signed_fields(headers)
        if signed is None:
            return 401, ("this server takes only requests signed with the run's key "
                         f"({', '.join(SIGNED_HEADERS)}: rlvr.serving.signing)")
        name = self.name or host
        expected = request_mac(self._key, method, target, name, signed.time_ms, signed.nonce,
                               signed.digest)
        if not hmac.compare_digest(signed.signature.encode(), expected.encode()):
            return 401, (f"the request's signature does not match (another key, or signed for "
                         f"a server other than {name})")
        now, signed_at = self._clock(), signed.time_ms / 1000
        if abs(now - signed_at) > self._window:
            return 401, (f"the request is stale: signed {now - signed_at:.0f} s from this "
                         f"server's clock (at most {self._window} s either way)")
        if signed.time_ms < int(self.started * 1000):  # both floored to the millisecond
            return 401, ("the request was signed before this server started (a request "
                         "captured while it was down)")
        with self._lock:
            while self._expiry and self._expiry[0][0] < now:
                self._seen.discard(heapq.heappop(self._expiry)[1])
            if signed.nonce in self._seen:
                return 401, "the request was replayed (its nonce was already used)"
            if len(self._seen) >= self._max:
                return 503, "too many requests in the signature window; retry"
            self._seen.add(signed.nonce)
            heapq.heappush(self._expiry, (signed_at + self._window, signed.nonce))
        return signed
