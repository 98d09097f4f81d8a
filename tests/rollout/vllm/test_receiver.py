"""rlvr's vLLM worker extension as `/collective_rpc` reaches it, on a stand-in worker: every
argument is checked before anything connects or loads; a reload reads only a directory under
the run's weights directory; a worker holding the run's key joins only a signed group. (The
same calls through the real vLLM server: tests/serving/test_server_trust.py.)"""

from __future__ import annotations

import pytest
import torch
import torch.distributed as dist

from rlvr.rollout.vllm.receiver import WeightReceiverExtension
from rlvr.rollout.weight_sync.broadcast import PlanRefused, SyncPlan, TensorSpec, encode_plan
from tests.rollout.rogue import pickled_command, rogue_store


class FakeWorker(WeightReceiverExtension):
    """What the extension needs of vLLM's worker; records reloads instead of loading."""

    rank = 0
    device = torch.device("cpu")

    def __init__(self):
        self.reloads: list[str] = []

    def reload_weights(self, weights_path=None, weights_iterator=None):
        self.reloads.append(weights_path)


@pytest.fixture
def run(tmp_path, monkeypatch):
    """The run's weights root (in the worker's environment) with one version in it."""
    root = tmp_path / "run" / "weight_updates"
    (root / "v1").mkdir(parents=True)
    (root / "v1" / "model.safetensors").write_bytes(b"x" * 16)
    monkeypatch.setenv("RLVR_WEIGHTS_ROOT", str(root))
    return root


def test_a_reload_reads_only_from_the_runs_weights_directory(run, tmp_path):
    worker = FakeWorker()
    secret = tmp_path / "secret"
    secret.mkdir()
    (secret / "model.safetensors").write_bytes(b"y" * 16)
    (run / "link").symlink_to(secret)
    for path in [str(secret), str(run / "link"), f"{run}/v1/../../../secret", "v1", "/",
                 str(run), 7, None]:
        with pytest.raises(ValueError):
            worker.reload_weights_from(path)
    assert worker.reloads == []  # vLLM was never asked to read anything
    worker.reload_weights_from(str(run / "v1"))
    assert worker.reloads == [str((run / "v1").resolve())]


def test_a_server_started_without_a_weights_directory_reloads_nothing(run, monkeypatch):
    monkeypatch.delenv("RLVR_WEIGHTS_ROOT")
    with pytest.raises(ValueError, match="without a weights directory"):
        FakeWorker().reload_weights_from(str(run / "v1"))


@pytest.mark.parametrize("args", [
    ["127.0.0.1", "29500", 1, 2], ["127.0.0.1", 0, 1, 2], ["127.0.0.1", 70000, 1, 2],
    ["", 29500, 1, 2], ["evil.example/x", 29500, 1, 2], [["127.0.0.1"], 29500, 1, 2],
    ["127.0.0.1", 29500, 0, 2], ["127.0.0.1", 29500, 2, 2], ["127.0.0.1", 29500, True, 2],
    ["127.0.0.1", 29500, 1, "2"]])
def test_group_arguments_are_checked_before_anything_connects(args, monkeypatch):
    monkeypatch.setattr(dist, "TCPStore", lambda *a, **k: pytest.fail("connected"))
    with pytest.raises(ValueError):
        FakeWorker().init_weight_group(*args)
    for bad in [{"backend": "mpi"}, {"timeout_s": -1}, {"timeout_s": "300"}]:
        with pytest.raises(ValueError):
            FakeWorker().init_weight_group("127.0.0.1", 29500, 1, 2, **bad)


def test_a_worker_with_the_runs_key_joins_no_store_an_attacker_runs(tmp_path, monkeypatch):
    """The attack: `/collective_rpc init_weight_group [HOST, PORT, 1, 2]` with HOST:PORT a store
    the caller runs. A pickle there ran a shell command in the worker; an unsigned plan would
    have let the caller feed it weights."""
    monkeypatch.setenv("RLVR_WEIGHT_SYNC_KEY", "the-runs-key-0123456789")
    marker = tmp_path / "owned"
    for value in (pickled_command(marker),
                  encode_plan(SyncPlan([TensorSpec("w", (1,), torch.float32)], 64, "gloo"),
                              None, "127.0.0.1", 0, 2)):
        store = rogue_store(value)
        with pytest.raises(PlanRefused):
            FakeWorker().init_weight_group("127.0.0.1", store.port, 1, 2, timeout_s=5)
    assert not marker.exists()


def test_the_engine_and_the_server_load_the_worker_extension_by_its_real_name():
    """vLLM imports the extension by a dotted name, given twice (the in-process engine, and the
    servers' command line, which may not import torch): both must name the class where it is."""
    from rlvr.rollout.vllm.receiver import WORKER_EXTENSION
    from rlvr.serving.server import WORKER_EXTENSION as SERVED

    where = f"{WeightReceiverExtension.__module__}.{WeightReceiverExtension.__qualname__}"
    assert WORKER_EXTENSION == SERVED == where
