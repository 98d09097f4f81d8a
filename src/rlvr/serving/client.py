"""Talk to one inference server over HTTP: generation, health, and the admin calls a trainer
makes to load new weights in place.

What it is: `ServerClient(address)`, a thin typed layer over the routes of vLLM's server
(`rlvr.serving.server` starts it with the flags these routes need). Generation goes through
`/inference/v1/generate`: token ids in; sampled token ids, the logprob of each under the
distribution it was drawn from, the finish reason and the weight version of every token out.
What it is not: a pool (which server to ask, retries, dropping dead servers: that is
`rlvr.rollout.remote.engine`), and it knows nothing of training.

Every request is signed with the run's key, and every answer must be signed back by the
server (`SignedRequests`, over `rlvr.serving.signing`): the servers rlvr starts answer nothing
unsigned (`rlvr.serving.guard`), and an answer without the server's signature is refused
(`ServerError`) before it is read, so a process that took a server's port neither passes for it
nor learns anything it can send to a server. The key itself is never sent. The health check
sends a challenge instead (`rlvr.serving.server.is_healthy`). Requests go straight to the
server, never through a proxy the environment names (`http_proxy`, `ALL_PROXY`, ...: httpx's
`trust_env=False`), and redirects are not followed (httpx's default).

Why token ids and not `/v1/completions` text: the learner must train on exactly the tokens
sampled, and re-tokenizing text can change them. Why one request per prompt: each prompt gets
its own seed (a batch of prompts in one completions request shares one).
"""

from __future__ import annotations

from typing import Any, Generator, Sequence

import httpx

from rlvr.serving.auth import KEY_ENV, KEY_FILE_ENV
from rlvr.serving.server import is_healthy, server_name
from rlvr.serving.signing import (ANSWER_SIGNATURE_HEADER, NONCE_HEADER, response_signed,
                                  sign_request)
from rlvr.types import FINISH_REASONS, Completion, FinishReason, SamplingParams

_NEEDS_KEY = (f"the server wants requests signed with the run's key: {KEY_ENV} or "
              f"{KEY_FILE_ENV} in the trainer's environment, or the run's "
              "<output_dir>/server.key")


class UnsignedAnswer(httpx.HTTPError):
    """An answer that does not carry the server's signature over it: from a process that does
    not hold the run's key (one that took the server's port), or a refusal of our signature."""


class SignedRequests(httpx.Auth):
    """httpx auth: signs each request for the server `name` with `key` (over the body exactly
    as sent) and refuses, with `UnsignedAnswer`, an answer the server did not sign for that
    request. Works for any httpx client, sync or async."""

    requires_request_body = True  # the digest is of the bytes sent (a stream is read first)
    requires_response_body = True  # the answer's signature covers its whole body

    def __init__(self, key: str, name: str):
        self._key, self.name = key, name

    def auth_flow(self, request: httpx.Request) -> Generator[httpx.Request, httpx.Response, None]:
        signed = sign_request(self._key, request.method, request.url.raw_path.decode("ascii"),
                              self.name, request.content)
        request.headers.update(signed)
        response = yield request
        if not response_signed(self._key, self.name, signed[NONCE_HEADER], response.status_code,
                               response.content, response.headers.get(ANSWER_SIGNATURE_HEADER)):
            why = _NEEDS_KEY if response.status_code == 401 else response.text[:300]
            error = UnsignedAnswer(f"{request.method} {request.url.path} answered "
                                   f"{response.status_code} without server {self.name}'s "
                                   f"signature (not the run's server, or our key is not its): "
                                   f"{why}")
            error.request = request
            raise error


class ServerError(RuntimeError):
    """A server did not answer, or answered with an error. `retryable` is False for a request
    the server rejected as invalid (sending it elsewhere would fail the same way)."""

    def __init__(self, address: str, what: str, retryable: bool = True):
        super().__init__(f"inference server {address}: {what}")
        self.address, self.retryable = address, retryable


def parse_version(label: str | None) -> int:
    """A server's weight-version label as rlvr's integer policy version ("default", the
    weights it started with, is 0)."""
    try:
        return int(label) if label not in (None, "", "default") else 0
    except ValueError:
        return 0


class UnfinishedAnswer(ValueError):
    """A sample answered with an end other than "stop" or "length": vLLM answers "abort", with
    the tokens sampled so far, for every request in flight when its server stops (SIGTERM,
    a preemption, a requeue) or an operator aborts them. Taken as finished, such a sample would
    be scored and trained on cut short."""


def finish_reason(choice: dict[str, Any]) -> FinishReason:
    """The choice's end as rlvr's `FinishReason` (none given: "stop", as vLLM's own answers
    default it); `UnfinishedAnswer` for any other."""
    reason = choice.get("finish_reason") or "stop"
    if reason not in FINISH_REASONS:
        raise UnfinishedAnswer(f"finish_reason {reason!r} after {len(choice.get('token_ids', []))}"
                               " tokens")
    return reason


def completion_from_choice(choice: dict[str, Any]) -> Completion:
    """One choice of a `/inference/v1/generate` answer (output mode "text") as a `Completion`:
    each token's version from the answer's weight-version spans."""
    token_ids = [int(t) for t in choice["token_ids"]]
    content = (choice.get("logprobs") or {}).get("content") or []
    if len(content) != len(token_ids):
        raise ValueError(f"{len(content)} logprobs for {len(token_ids)} tokens")
    versions = [0] * len(token_ids)
    for span in choice.get("weight_versions") or []:
        v = parse_version(span.get("version"))
        for i in range(max(0, span["start"]), min(len(token_ids), span["end"])):
            versions[i] = v
    uniform = len(set(versions)) <= 1
    return Completion(
        token_ids_T=token_ids, logprobs_T=[float(c["logprob"]) for c in content],
        finish_reason=finish_reason(choice),
        text=choice.get("text") or "", model_version=min(versions, default=0),
        versions_T=None if uniform else versions)


def generate_body(prompt_ids: Sequence[int], params: SamplingParams, seed: int | None,
                  stop_token_ids: Sequence[int]) -> dict[str, Any]:
    sampling = {"n": params.n, "max_tokens": params.max_tokens, "temperature": params.temperature,
                "top_p": params.top_p, "logprobs": 0, "skip_special_tokens": True,
                "stop_token_ids": list(stop_token_ids), "include_stop_str_in_output": True}
    if params.stop_strings:
        sampling["stop"] = list(params.stop_strings)
    if seed is not None:
        sampling["seed"] = seed
    return {"token_ids": list(prompt_ids), "sampling_params": sampling, "output_mode": "text"}


class ServerClient:
    """One server at `address` ("http://host:port"). Generation is async (many requests in
    flight share the server's continuous batching); admin calls are blocking. `key`: the
    run's server key, which signs every request and every answer (None: requests go unsigned
    and answers are taken as they come: a server of your own with no door). `name`: the name
    the server proves the key under (`rlvr.serving.server.proven_name`); None: the address's
    "host:port", the name rlvr gives a server it starts."""

    def __init__(self, address: str, request_timeout_s: float = 600.0,
                 admin_timeout_s: float = 600.0, key: str | None = None,
                 name: str | None = None):
        self.address = address.rstrip("/")
        self.name = name or server_name(self.address)
        self._request_timeout = httpx.Timeout(request_timeout_s, connect=10.0)
        self._key = key
        self._auth = SignedRequests(key, self.name) if key else None
        self._admin = httpx.Client(base_url=self.address, auth=self._auth, trust_env=False,
                                   timeout=httpx.Timeout(admin_timeout_s, connect=10.0))
        self._async: httpx.AsyncClient | None = None  # bound to the loop that first uses it

    async def generate(self, prompt_ids: Sequence[int], params: SamplingParams,
                       seed: int | None, stop_token_ids: Sequence[int] = ()) -> list[Completion]:
        """`params.n` completions of one prompt."""
        if self._async is None:
            self._async = httpx.AsyncClient(base_url=self.address, timeout=self._request_timeout,
                                            auth=self._auth, trust_env=False,
                                            limits=httpx.Limits(max_connections=None))
        body = generate_body(prompt_ids, params, seed, stop_token_ids)
        try:
            r = await self._async.post("/inference/v1/generate", json=body)
        except httpx.HTTPError as e:
            raise ServerError(self.address, f"{type(e).__name__}: {e}") from e
        if r.status_code != 200:
            raise ServerError(self.address, f"generate answered {r.status_code}: "
                                            f"{_why(r)}", retryable=r.status_code >= 500)
        try:
            choices = sorted(r.json()["choices"], key=lambda c: c["index"])
            return [completion_from_choice(c) for c in choices]
        except UnfinishedAnswer as e:  # retryable: elsewhere, or here once it is back
            raise ServerError(self.address, f"generate answered a sample unfinished ({e}; a "
                                            "stopping server aborts what it was generating): "
                                            "none of the request's samples is used") from e
        except (KeyError, TypeError, ValueError) as e:
            raise ServerError(self.address, f"unreadable generate answer ({e})") from e

    async def aclose(self) -> None:
        if self._async is not None:
            await self._async.aclose()
            self._async = None

    # ---- blocking admin calls -------------------------------------------------------------

    def healthy(self, timeout_s: float = 5.0) -> bool:
        """The server answers `/health` and, with a key, proves it holds it under its name
        (`is_healthy`)."""
        return is_healthy(self.address, timeout_s, key=self._key,
                          name=self.name if self._key else None)

    def pause(self, mode: str) -> None:
        """Stop scheduling: `keep` freezes running requests (they continue, recomputed on the
        new weights, after `resume`), `wait` lets them finish first."""
        self._post("/pause", params={"mode": mode})

    def resume(self) -> None:
        self._post("/resume")

    def reload_weights(self, directory: str) -> None:
        """Load the safetensors in `directory` in place (every worker); the caller has paused.
        The server loads only from under its run's weights directory (`rlvr.serving.guard`)."""
        self.collective_rpc("reload_weights_from", args=[directory])

    def set_version(self, version: int) -> None:
        self._post("/update_weight_version", json={"new_version": str(version)})

    def weight_version(self) -> int:
        return parse_version(self._get("/weight_info").get("weight_version"))

    def reset_prefix_cache(self) -> None:
        self._post("/reset_prefix_cache")

    def collective_rpc(self, method: str, args: Sequence[Any] = (),
                       kwargs: dict[str, Any] | None = None,
                       timeout_s: float | None = None) -> list[Any]:
        """Run `method` in every worker of the server (vLLM's worker, with rlvr's extension);
        each worker's return value."""
        body: dict[str, Any] = {"method": method, "args": list(args), "kwargs": kwargs or {}}
        if timeout_s is not None:
            body["timeout"] = timeout_s
        answer = self._post("/collective_rpc", json=body,
                            timeout=None if timeout_s is None else timeout_s + 30)
        return list((answer or {}).get("results", []))

    def close(self) -> None:
        self._admin.close()

    def _get(self, path: str) -> dict[str, Any]:
        try:
            r = self._admin.get(path)
        except httpx.HTTPError as e:
            raise ServerError(self.address, f"GET {path}: {type(e).__name__}: {e}") from e
        if r.status_code != 200:
            raise ServerError(self.address, f"GET {path} answered {r.status_code}: {_why(r)}")
        return r.json()

    def _post(self, path: str, timeout: float | None | object = httpx.USE_CLIENT_DEFAULT,
              **kwargs: Any) -> dict[str, Any] | None:
        try:
            r = self._admin.post(path, timeout=timeout, **kwargs)
        except httpx.HTTPError as e:
            raise ServerError(self.address, f"POST {path}: {type(e).__name__}: {e}") from e
        if r.status_code != 200:
            raise ServerError(self.address, f"POST {path} answered {r.status_code}: "
                                            f"{_why(r)}")
        return r.json() if r.content else None


def _why(r: httpx.Response) -> str:
    return _NEEDS_KEY if r.status_code == 401 else r.text[:300]
