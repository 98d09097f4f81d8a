"""A stand-in for vLLM's HTTP server: the routes rlvr uses, answered at once, with faults on
demand. Tests of pools, retries, dropped servers, weight-update order and launcher lifecycles
run against it in milliseconds instead of a real server's minute of start-up.

Generation is deterministic: a request's tokens are drawn from its seed (or the prompt), so
tests can check which seed a request carried. In process (`FakeServer(...).start()`) or as a
process of its own (`python tests/serving/fake_server.py --port P`, what a launcher test
starts in place of vLLM).

Like rlvr's real servers it may demand a key (`key=`, or as a process `RLVR_SERVER_KEY` in its
environment, which a launcher sets): every route then answers 401 to a request not signed with
it, stale or replayed (`rlvr.serving.signing.RequestVerifier`, the door's own check), and signs
every answer to a signed request (`sign_response`), except the health challenge, which it
answers with the door's own proof (`rlvr.serving.guard.health_challenge`, `proof_headers`;
bound to `name=`, or as a process `RLVR_SERVER_NAME`, its own "host:port" by default), and
`/collective_rpc` takes only rlvr's methods (`rlvr.serving.guard.RPC_METHODS`). It can answer
"abort" as a stopping vLLM server does (`abort_generate`, `stop_on_abort`)."""

from __future__ import annotations

import argparse
import json
import os
import random
import sys
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from urllib.parse import parse_qs, urlparse

from rlvr.serving.auth import CHALLENGE_HEADER, KEY_ENV, SERVER_NAME_ENV
from rlvr.serving.guard import RPC_METHODS, health_challenge, proof_headers
from rlvr.serving.signing import (ANSWER_SIGNATURE_HEADER, SIGNED_HEADERS, RequestVerifier,
                                  SignedRequest, body_digest, sign_response)


class _QuietOnHangUp(ThreadingHTTPServer):
    """A client that hangs up mid-answer (the trainer giving up on a server) is not an error of
    the fake server's: socketserver would print its traceback into the test's stderr."""

    def handle_error(self, request, client_address):
        if not isinstance(sys.exc_info()[1], (BrokenPipeError, ConnectionResetError)):
            super().handle_error(request, client_address)


class FakeServer:
    def __init__(self, port: int = 0, vocab: int = 250, tokens: int = 4, host: str = "127.0.0.1",
                 key: str | None = None, name: str | None = None):
        self.vocab, self.tokens = vocab, tokens
        self.key = key  # None: every request answered, as before the door existed
        self._name = name  # what its health proof is bound to; None: its own "host:port"
        self.refused: list[str] = []  # paths answered 401 (unsigned, wrong key, stale, replayed)
        self.version = "default"
        self.calls: list[tuple[str, dict]] = []  # (path, body) of every POST, in order
        self.generate_seeds: list[int | None] = []
        self.fail_generate = 0  # answer this many generate requests with 500
        self.fail_reload = False
        self.delay_s = 0.0  # per generate request
        self.die_after: int | None = None  # stop answering after this many generate requests
        # Answer this many generate requests as a vLLM server that is stopping does: 200, each
        # sample "abort" with the tokens made so far; `stop_on_abort`: then stop, as it does.
        self.abort_generate = 0
        self.stop_on_abort = False
        self.paused = False
        self.reloaded: list[str] = []  # directories reloaded from (their files checked)
        self.reloaded_names: list[list[str]] = []
        self.reloaded_dtypes: list[set[str]] = []  # the dtypes of each reloaded file's tensors
        self.weight_dtype = "float32"  # what rlvr's worker extension would report; None: no
        self._lock = threading.Lock()
        self.httpd = _QuietOnHangUp((host, port), self._handler())
        self.httpd.daemon_threads = True
        self._thread: threading.Thread | None = None
        # The door's own check; it refuses what was signed before it was made, as a server
        # refuses what was signed before it started.
        self.verifier = RequestVerifier(key or "", self.name)

    @property
    def address(self) -> str:
        host = self.httpd.server_address[0]
        return f"http://{'127.0.0.1' if host in ('0.0.0.0', '') else host}:" \
               f"{self.httpd.server_address[1]}"

    @property
    def name(self) -> str:
        return self._name if self._name is not None else self.address.removeprefix("http://")

    def start(self) -> "FakeServer":
        self._thread = threading.Thread(target=self.httpd.serve_forever, args=(0.05,),
                                        daemon=True)
        self._thread.start()
        return self

    def stop(self) -> None:
        """Dies: stops answering (connections are refused from now on)."""
        self.httpd.shutdown()
        self.httpd.server_close()

    def posted(self, path: str) -> list[dict]:
        return [body for p, body in self.calls if p == path]

    # ---- routes -----------------------------------------------------------------------------

    def generate(self, body: dict) -> tuple[int, dict]:
        sp = body["sampling_params"]
        with self._lock:
            self.generate_seeds.append(sp.get("seed"))
            if self.die_after is not None and len(self.generate_seeds) > self.die_after:
                threading.Thread(target=self.stop, daemon=True).start()
                return 500, {"error": "dying"}
            if self.fail_generate > 0:
                self.fail_generate -= 1
                return 500, {"error": "injected failure"}
            aborting = self.abort_generate > 0
            if aborting:
                self.abort_generate -= 1
                if self.stop_on_abort:
                    threading.Thread(target=self.stop, daemon=True).start()
        if self.delay_s:
            time.sleep(self.delay_s)
        rng = random.Random(sp.get("seed", sum(body["token_ids"])))
        n_tokens = min(self.tokens, sp["max_tokens"])
        if aborting:
            n_tokens = n_tokens // 2  # cut short where the server stopped
        choices = []
        for k in range(sp["n"]):
            ids = [rng.randrange(3, self.vocab) for _ in range(n_tokens)]
            choices.append({
                "index": k, "token_ids": ids, "text": " ".join(map(str, ids)),
                "finish_reason": ("abort" if aborting else
                                  "length" if n_tokens == sp["max_tokens"] else "stop"),
                "weight_versions": [{"version": self.version, "start": 0, "end": n_tokens}],
                "logprobs": {"content": [{"token": str(t), "logprob": -1.0} for t in ids]}})
        return 200, {"choices": choices}

    def collective_rpc(self, body: dict) -> tuple[int, dict]:
        if body["method"] not in RPC_METHODS:  # as rlvr's door answers vLLM's own methods
            return 403, {"error": f"method {body['method']} refused"}
        if body["method"] == "weight_dtype" and self.weight_dtype is not None:
            return 200, {"results": [self.weight_dtype]}
        if body["method"] != "reload_weights_from":
            return 400, {"error": f"unknown method {body['method']}"}
        path = Path(body["args"][0] if body.get("args") else body["kwargs"]["weights_path"])
        files = sorted(path.glob("*.safetensors"))
        if self.fail_reload or not files:
            return 500, {"error": f"cannot reload from {path}"}
        from safetensors import safe_open

        with safe_open(str(files[0]), "pt") as f:
            self.reloaded_names.append(sorted(f.keys()))
            self.reloaded_dtypes.append({str(f.get_slice(k).get_dtype()) for k in f.keys()})
        self.reloaded.append(str(path))
        return 200, {"results": [None]}

    def _handler(self):
        server = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args):  # quiet
                pass

            nonce: str | None = None  # the signed request's, once checked: answers are signed

            def _answer(self, status: int, payload: dict | None = None,
                        headers: list[tuple[str, str]] = ()) -> None:
                data = json.dumps(payload or {}).encode()
                self.send_response(status)
                self.send_header("content-type", "application/json")
                self.send_header("content-length", str(len(data)))
                for name, value in headers:
                    self.send_header(name, value)
                if self.nonce is not None:
                    self.send_header(ANSWER_SIGNATURE_HEADER, sign_response(
                        server.key, server.name, self.nonce, status, data))
                self.end_headers()
                self.wfile.write(data)

            def _health_challenge(self) -> bool:
                """Answered the door's way: a keyless challenge to GET /health gets the proof."""
                self.nonce = None
                challenge = health_challenge("GET", urlparse(self.path).path,
                                             self.headers.get(CHALLENGE_HEADER))
                if challenge is None or server.key is None:
                    return False
                self._answer(200, headers=proof_headers(server.key, server.name, challenge))
                return True

            def _locked_out(self, body: bytes = b"") -> bool:
                self.nonce = None
                if server.key is None:
                    return False
                signed = server.verifier.check(
                    self.command, self.path, self.headers.get("host", ""),
                    {h: self.headers.get(h) for h in SIGNED_HEADERS})
                if isinstance(signed, SignedRequest) and signed.digest == body_digest(body):
                    self.nonce = signed.nonce
                    return False
                server.refused.append(urlparse(self.path).path)
                why = signed[1] if isinstance(signed, tuple) else "not the body signed"
                self._answer(401, {"error": why})
                return True

            def do_GET(self):
                if self._health_challenge() or self._locked_out():
                    return
                path = urlparse(self.path).path
                if path == "/health":
                    return self._answer(200)
                if path == "/weight_info":
                    return self._answer(200, {"weight_version": server.version})
                return self._answer(404)

            def do_POST(self):
                length = int(self.headers.get("content-length") or 0)
                raw = self.rfile.read(length)
                if self._locked_out(raw):
                    return
                url = urlparse(self.path)
                body = json.loads(raw or b"{}")
                server.calls.append((url.path, {**body, **{k: v[0] for k, v in
                                                           parse_qs(url.query).items()}}))
                if url.path == "/inference/v1/generate":
                    return self._answer(*server.generate(body))
                if url.path == "/pause":
                    server.paused = True
                    return self._answer(200, {"status": "paused"})
                if url.path == "/resume":
                    server.paused = False
                    return self._answer(200, {"status": "resumed"})
                if url.path == "/update_weight_version":
                    server.version = body["new_version"]
                    return self._answer(200, {"success": True})
                if url.path == "/reset_prefix_cache":
                    return self._answer(200, {"success": True})
                if url.path == "/collective_rpc":
                    return self._answer(*server.collective_rpc(body))
                return self._answer(404)

        return Handler


@contextmanager
def running_servers(count: int = 2, **kwargs) -> Iterator[list[FakeServer]]:
    """`count` fake servers, stopped after (a test may have stopped or killed some already)."""
    started = [FakeServer(**kwargs).start() for _ in range(count)]
    try:
        yield started
    finally:
        for s in started:
            try:
                s.stop()
            except OSError:
                pass


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--vocab", type=int, default=250)
    parser.add_argument("--host", default="127.0.0.1")
    args = parser.parse_args()
    server = FakeServer(args.port, args.vocab, host=args.host,
                        key=os.environ.get(KEY_ENV) or None,
                        # the host and port it was given, as `rlvr serve`'s name is
                        name=os.environ.get(SERVER_NAME_ENV) or f"{args.host}:{args.port}")
    print(f"fake server at {server.address}", flush=True)
    server.httpd.serve_forever()


if __name__ == "__main__":
    main()
