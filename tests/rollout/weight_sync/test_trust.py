"""The weight-sync handshake as an attacker meets it: a store holding a pickle runs nothing in
the receiver (the plan is JSON, checked field by field); a receiver holding the run's key joins
only a group whose plan is signed with it, for that address and size; and the sender's store
listens on the address it was given, not on every interface."""

from __future__ import annotations

import socket
import threading

import pytest
import torch

from rlvr.rollout.weight_sync.broadcast import (BroadcastReceiver, BroadcastTransport, PlanRefused,
                                      SyncPlan, TensorSpec, decode_plan, encode_plan, layout_of)
from tests.rollout.rogue import other_interface_address, pickled_command, rogue_store

KEY = "the-runs-key-0123456789"


def _plan() -> SyncPlan:
    return SyncPlan([TensorSpec("w", (2, 3), torch.float32)], 1024, "gloo")


@pytest.mark.parametrize("token", [None, KEY])
def test_a_pickle_in_the_store_runs_nothing_in_the_receiver(tmp_path, token):
    marker = tmp_path / "owned"
    store = rogue_store(pickled_command(marker))
    with pytest.raises(Exception):
        BroadcastReceiver("127.0.0.1", store.port, 1, 1, timeout_s=5, token=token)
    assert not marker.exists(), "the receiver unpickled the store's value and ran it"


def test_a_receiver_with_the_key_refuses_an_unsigned_or_wrongly_signed_plan():
    for value in (encode_plan(_plan(), None, "127.0.0.1", 0, 2),
                  encode_plan(_plan(), "another-runs-key", "127.0.0.1", 0, 2)):
        store = rogue_store(value)
        with pytest.raises(PlanRefused, match="not signed with this run's key"):
            BroadcastReceiver("127.0.0.1", store.port, 1, 1, timeout_s=5, token=KEY)


def test_a_signed_plan_is_good_for_its_own_group_only():
    signed = encode_plan(_plan(), KEY, "10.0.0.1", 29500, 3)
    assert decode_plan(signed, KEY, "10.0.0.1", 29500, 3) == _plan()
    for host, port, size in [("10.0.0.2", 29500, 3), ("10.0.0.1", 29501, 3),
                             ("10.0.0.1", 29500, 2)]:
        with pytest.raises(PlanRefused):
            decode_plan(signed, KEY, host, port, size)


@pytest.mark.parametrize("layout, bucket_bytes, backend", [
    ([["w", [2], "os.system"]], 8, "gloo"), ([["w", [-1], "float32"]], 8, "gloo"),
    ([["w", [2.5], "float32"]], 8, "gloo"), ([["w", [2]]], 8, "gloo"),
    ([[7, [2], "float32"]], 8, "gloo"), ([], "8", "gloo"), ([], 0, "gloo"), ([], 8, "mpi")])
def test_a_malformed_plan_is_refused_field_by_field(layout, bucket_bytes, backend):
    import json

    text = json.dumps({"layout": layout, "bucket_bytes": bucket_bytes, "backend": backend})
    with pytest.raises(PlanRefused):
        decode_plan(json.dumps({"format": 1, "plan": text, "mac": ""}).encode(), None,
                    "h", 1, 2)
    with pytest.raises(PlanRefused):
        decode_plan(b"\x80\x04not json", None, "h", 1, 2)


def test_a_signed_push_arrives_whole():
    weights = {"a": torch.randn(3, 4), "b": torch.arange(5)}
    listen = socket.create_server(("127.0.0.1", 0))
    port = listen.getsockname()[1]
    got, errors = {}, []

    def receive():
        try:
            receiver = BroadcastReceiver("127.0.0.1", port, 1, 1, timeout_s=30, token=KEY)
            version, stream = receiver.receive()
            got.update({name: t.clone() for name, t in stream}, version=version)
        except BaseException as e:  # noqa: BLE001  re-raised below
            errors.append(e)

    thread = threading.Thread(target=receive)
    thread.start()
    transport = BroadcastTransport("127.0.0.1", port, 1, layout_of(weights.items()),
                                   timeout_s=30, token=KEY, listen=listen)
    transport.push(iter(weights.items()), 4)
    thread.join(timeout=60)
    transport.close()
    assert not errors, errors
    assert got.pop("version") == 4
    assert all(torch.equal(got[k], v) for k, v in weights.items())


def test_the_senders_store_listens_on_its_host_only():
    other = other_interface_address()
    if other is None:
        pytest.skip("this host has no interface besides loopback")
    transport = BroadcastTransport("127.0.0.1", 0, 0, [TensorSpec("w", (1,), torch.float32)],
                                   timeout_s=10)
    port = transport.store.port
    socket.create_connection(("127.0.0.1", port), timeout=5).close()  # where it should listen
    with pytest.raises(OSError):  # refused: the store is not on this interface
        socket.create_connection((other, port), timeout=5).close()
