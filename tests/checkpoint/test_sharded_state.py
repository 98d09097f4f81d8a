"""Sharded training states (`rlvr.checkpoint.sharded`): saved by 2 FSDP2 ranks over gloo, each
writing its own shard, they resume on 2 ranks and in one process without a process group; the
next update then matches the run that did not stop. A rank killed between shard writes leaves
the previous state as it was. Through the trainer, `checkpoint.state_format=sharded` resumes
exactly.

The 2 ranks are plain `torch.multiprocessing` processes running `LearnerWorker` (no Ray), in one
spawn per module: it saves, records the uninterrupted run, resumes in a new process group, and
finally dies mid-save; the tests read what it recorded.
"""

from __future__ import annotations

import copy
import hashlib
import json
import os
import signal
import time
from pathlib import Path
from typing import Any

import pytest
import torch
import torch.multiprocessing as mp
from torch.distributed.checkpoint.filesystem import FileSystemWriter

import rlvr.run.loop
from rlvr.algorithm.losses import LossParams, PolicyLoss
from rlvr.checkpoint.sharded import save_sharded
from rlvr.checkpoint.state import list_states, load_latest_state, verify_state
from rlvr.config import load_config
from rlvr.distributed.balance import split_batch_for_ranks
from rlvr.distributed.learner_group import LearnerGroup, combine_results
from rlvr.distributed.learner_worker import LearnerSpec, LearnerWorker
from rlvr.distributed.trainer_learner import GroupLearner
from rlvr.learner import Learner, LearnerSettings, LearnerState, UpdateResult
from rlvr.models import load_causal_lm
from rlvr.run.loop import train
from tests.distributed.test_learner_group import _batch

# No warm-up, so the first update moves the weights. eps=1e-6: see
# tests/distributed/test_resume_across_launchers.py (2 ranks' summed gradients round
# differently from one process's; a tiny eps would magnify that in Adam's first step).
SETTINGS = LearnerSettings(learning_rate=1e-3, lr_scheduler_type="linear", warm_up_steps=0,
                           total_optimizer_steps=10, max_grad_norm=1.0, eps=1e-6)
NUM_MICRO_BATCHES = 2
# Metrics that depend on wall time, not on the training (as in tests/test_resume.py).
TIMING = ("time/", "learner_tokens_per_second_step", "learner_mfu", "memory/")


def _loss(batch) -> PolicyLoss:
    return PolicyLoss("dapo", LossParams(clip_lower=0.2, clip_higher=0.28, beta=0.1,
                                         kl_estimator=2,
                                         denominator=float(batch.num_response_tokens)))


def _rank_update(worker: LearnerWorker, seed: int) -> UpdateResult:
    """This rank's share of the update on batch `seed`, split as `LearnerGroup` splits it."""
    batch = _batch(4, seed)
    split = split_batch_for_ranks(batch, 2, NUM_MICRO_BATCHES, None)
    loss = _loss(batch)
    return worker.update(split.parts[worker.rank], loss.name, loss.params,
                         split.num_micro_batches, 1, 1.0)


def _local_learner(model_dir: str) -> Learner:
    policy = load_causal_lm(model_dir)
    return Learner(policy, Learner.frozen_copy(policy), SETTINGS)


def _local_update(learner: Learner, seed: int) -> UpdateResult:
    batch = _batch(4, seed)
    return learner.update(batch, _loss(batch), NUM_MICRO_BATCHES, 1, 1.0)


def _file_digests(directory: Path) -> dict[str, str]:
    return {p.name: hashlib.sha256(p.read_bytes()).hexdigest()
            for p in sorted(directory.iterdir())}


def _die_once_rank_0_has_written(self, *args, **kwargs):
    """Rank 1's `FileSystemWriter.write_data` in the crash phase: wait until rank 0's shard is on
    disk, then die like a killed process, before writing its own."""
    tmp = Path(self.path)
    deadline = time.monotonic() + 30
    while not list(tmp.glob("__0_*.distcp")) and time.monotonic() < deadline:
        time.sleep(0.01)
    os.kill(os.getpid(), signal.SIGKILL)


def _two_ranks(rank: int, model_dir: str, out: Path, stores: tuple[str, str]) -> None:
    """One rank of the whole 2-rank story; rank 0 records what the tests check."""
    torch.set_num_threads(1)
    # On CPU over gloo, also on a GPU host: two ranks need a GPU each for NCCL, and the
    # one-process tests compare with a learner on the CPU.
    spec = LearnerSpec(model_dir=model_dir, settings=SETTINGS, sharding="fsdp",
                       with_reference=True, timeout_s=60, device="cpu")
    # 1. One step, saved sharded; the full state gathered for comparison.
    worker = LearnerWorker(spec, rank, 2)
    worker.setup(stores[0])
    _rank_update(worker, seed=0)
    worker.save_sharded_state(out / "state", {"step": 1})
    saved = copy.deepcopy(worker.state_dict())  # its step counts are the live tensors
    # 2. The uninterrupted run: the next update.
    straight = _rank_update(worker, seed=1)
    straight_weights = worker.named_full_weights()
    if rank == 0:
        torch.save(saved, out / "saved.pt")
        (out / "state_digests.json").write_text(json.dumps(_file_digests(out / "state")))
    torch.save({"result": straight, "weights": straight_weights}, out / f"straight_{rank}.pt")
    worker.shutdown()
    # 3. A new learner in a new process group resumes and takes the same next update.
    worker = LearnerWorker(spec, rank, 2)
    worker.setup(stores[1])
    extra = worker.load_sharded_state(out / "state")
    loaded = copy.deepcopy(worker.state_dict())
    resumed = _rank_update(worker, seed=1)
    resumed_weights = worker.named_full_weights()
    torch.save({"extra": extra, "loaded": loaded, "result": resumed, "weights": resumed_weights},
               out / f"resumed_{rank}.pt")
    # 4. A newer save over the same directory, during which rank 1 dies between shard writes.
    _rank_update(worker, seed=2)
    if rank == 1:
        FileSystemWriter.write_data = _die_once_rank_0_has_written
    try:
        worker.save_sharded_state(out / "state", {"step": 3})
    except BaseException as e:  # rank 0 may see its peer go; it must not publish anything
        (out / "rank_0_saw.txt").write_text(repr(e))


@pytest.fixture(scope="module")
def two_rank_story(tiny_model_dir, tmp_path_factory) -> dict[str, Any]:
    out = tmp_path_factory.mktemp("sharded")
    # File stores, not TCP ports: a port picked here and bound seconds later by the second
    # group was sometimes taken by then by another test worker (EADDRINUSE).
    stores = f"file://{out}/group_1", f"file://{out}/group_2"
    start = time.monotonic()
    with pytest.raises(mp.ProcessExitedException) as died:
        mp.spawn(_two_ranks, args=(tiny_model_dir, out, stores), nprocs=2, join=True)
    seconds = time.monotonic() - start
    return {"out": out, "died": died.value, "seconds": seconds,
            "saved": torch.load(out / "saved.pt", weights_only=False),
            "straight": [torch.load(out / f"straight_{r}.pt", weights_only=False)
                         for r in range(2)],
            "resumed": [torch.load(out / f"resumed_{r}.pt", weights_only=False)
                        for r in range(2)]}


def _assert_same_state(got: LearnerState, want: LearnerState) -> None:
    """Bit for bit: a state is stored, not recomputed."""
    for part in ("policy", "reference"):
        assert got[part].keys() == want[part].keys()
        for name, tensor in want[part].items():
            assert torch.equal(got[part][name], tensor), (part, name)
    assert got["optimizer"]["state"].keys() == want["optimizer"]["state"].keys()
    for name, entry in want["optimizer"]["state"].items():
        for key, value in entry.items():
            assert torch.equal(got["optimizer"]["state"][name][key], value), (name, key)
    assert got["optimizer"]["param_groups"] == want["optimizer"]["param_groups"]
    assert got["scheduler"] == want["scheduler"]


def _assert_same_update(got: UpdateResult, want: UpdateResult) -> None:
    tokens = want.num_response_tokens
    assert got.num_response_tokens == tokens and got.learning_rate == want.learning_rate
    assert got.loss_sums.keys() == want.loss_sums.keys()
    for key, value in want.loss_sums.items():  # per token: the loss itself
        assert got.loss_sums[key] / tokens == pytest.approx(value / tokens, abs=1e-6), key
    assert got.grad_norm == pytest.approx(want.grad_norm, rel=1e-6)


def _assert_close_weights(got: dict[str, torch.Tensor], want: dict[str, torch.Tensor]) -> None:
    assert got.keys() == want.keys()
    for name, tensor in want.items():
        torch.testing.assert_close(got[name], tensor, atol=1e-6, rtol=0, msg=name)


def test_a_state_saved_by_two_ranks_resumes_on_two(two_rank_story):
    story = two_rank_story
    assert story["seconds"] < 60
    assert sorted(os.listdir(story["out"] / "state")) == [
        ".metadata", "__0_0.distcp", "__1_0.distcp", "extra.pt"]  # each rank its own shard
    resumed, straight = story["resumed"], story["straight"]
    assert resumed[0]["extra"] == resumed[1]["extra"] == {"step": 1}
    _assert_same_state(resumed[0]["loaded"], story["saved"])
    for rank in range(2):
        _assert_same_update(resumed[rank]["result"], straight[rank]["result"])
    _assert_close_weights(resumed[0]["weights"], straight[0]["weights"])


def test_a_state_saved_by_two_ranks_resumes_in_one_process(two_rank_story, tiny_model_dir):
    assert not torch.distributed.is_initialized()
    learner = _local_learner(tiny_model_dir)
    _local_update(learner, seed=5)  # somewhere else entirely: everything must be overwritten
    assert learner.load_sharded_state(two_rank_story["out"] / "state") == {"step": 1}
    _assert_same_state(learner.training_state(), two_rank_story["saved"])
    straight = two_rank_story["straight"]
    result = _local_update(learner, seed=1)
    _assert_same_update(result, combine_results([s["result"] for s in straight], 0.0))
    _assert_close_weights(dict(learner.named_weights()), straight[0]["weights"])


def test_a_rank_killed_between_shard_writes_leaves_the_previous_state(two_rank_story):
    story, out = two_rank_story, two_rank_story["out"]
    died = story["died"]
    assert died.error_index == 1 and died.exit_code == -signal.SIGKILL
    # Rank 0 wrote its new shard, rank 1 none: the save was torn between shard writes...
    torn = sorted(os.listdir(out / ".tmp-state"))
    assert "__0_0.distcp" in torn and "__1_0.distcp" not in torn
    # ... and never published: the state of step 1 is there, byte for byte (and it loads: the
    # one-process test reads it after this crash).
    assert _file_digests(out / "state") == json.loads((out / "state_digests.json").read_text())


def test_a_fresh_optimizer_stays_fresh_and_a_failed_save_publishes_nothing(tiny_model_dir,
                                                                          tmp_path):
    learner, other = _local_learner(tiny_model_dir), _local_learner(tiny_model_dir)
    learner.skip_update(1)  # the schedule moved, the optimizer never stepped
    learner.save_sharded_state(tmp_path / "state", {"step": 1})
    assert not learner.optimizer.state  # saving did not step it
    _local_update(other, seed=0)
    other.load_sharded_state(tmp_path / "state")
    assert not other.optimizer.state  # fresh again: its first step will be a first step
    assert other.scheduler.state_dict() == learner.scheduler.state_dict()
    assert other.optimizer.param_groups[0]["lr"] == learner.optimizer.param_groups[0]["lr"]
    assert _local_update(other, 0).grad_norm == pytest.approx(_local_update(learner, 0).grad_norm)
    _assert_close_weights(dict(other.named_weights()), dict(learner.named_weights()))

    before = _file_digests(tmp_path / "state")

    def fail(*args, **kwargs):
        raise OSError("disk full")

    writer = FileSystemWriter.write_data
    FileSystemWriter.write_data = fail
    try:
        with pytest.raises(RuntimeError, match="disk full"):
            save_sharded(tmp_path / "state", learner.policy, learner.optimizer,
                         learner.reference, {})
    finally:
        FileSystemWriter.write_data = writer
    assert _file_digests(tmp_path / "state") == before
    learner.save_sharded_state(tmp_path / "state", {"step": 2})  # clears the torn temporary
    assert sorted(os.listdir(tmp_path)) == ["state"]


def test_a_group_learner_saves_sharded_for_a_learner(tiny_model_dir, tmp_path):
    """The driver's handle passes the calls to its ranks (here the local backend's one)."""
    spec = LearnerSpec(model_dir=tiny_model_dir, settings=SETTINGS, with_reference=True,
                       num_threads=0)
    group = GroupLearner(LearnerGroup(spec), load_causal_lm(tiny_model_dir))
    try:
        group.update(_batch(4, 0), _loss(_batch(4, 0)), NUM_MICRO_BATCHES, 1, 1.0)
        group.save_sharded_state(tmp_path / "state", {"step": 1})
        learner = _local_learner(tiny_model_dir)
        assert learner.load_sharded_state(tmp_path / "state") == {"step": 1}
        _assert_same_state(learner.training_state(), group.training_state())
        assert group.load_sharded_state(tmp_path / "state") == {"step": 1}
    finally:
        group.close()


def _cfg(out: Path, *overrides: str):
    return load_config("configs/tiny.yaml", [
        f"experiment.output_dir={out}", "logging.progress_bar=false", "eval.local_eval_every=0",
        "eval.eval_at_start=false", "checkpoint.save_freq=0", "checkpoint.checkpoint_state_freq=1",
        "checkpoint.state_format=sharded", "algorithm.filter_zero_std_samples=false",
        *overrides])


def _metric_rows(out: Path) -> list[dict[str, float]]:
    rows = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
    return [{k: v for k, v in r.items() if not k.startswith(TIMING)} for r in rows]


class _Stopped(Exception):
    """The run stopped between steps (as a crash would stop it, but catchable here)."""


def test_the_trainer_resumes_a_sharded_state_exactly(tmp_path, monkeypatch):
    straight, stopped = tmp_path / "straight", tmp_path / "stopped"
    train(_cfg(straight))  # steps 1-3
    real_step = rlvr.run.loop.one_training_step

    def stop_at_step_3(run, step, produced=None):
        if step == 3:
            raise _Stopped
        return real_step(run, step, produced)

    monkeypatch.setattr(rlvr.run.loop, "one_training_step", stop_at_step_3)
    with pytest.raises(_Stopped):
        train(_cfg(stopped))  # steps 1-2, each state saved
    monkeypatch.setattr(rlvr.run.loop, "one_training_step", real_step)
    newest = list_states(stopped / "state")[-1]
    assert newest.name == "step_000002" and verify_state(newest) is None
    assert (newest / "learner" / ".metadata").exists()
    assert not (newest / "policy.safetensors").exists()  # the learner's part is sharded only
    assert "learner/__0_0.distcp" in json.loads((newest / "manifest.json").read_text())
    assert load_latest_state(stopped / "state").learner_dir == newest / "learner"
    run = train(_cfg(stopped))  # resumes after step 2
    assert run.start_step == 2
    assert [r["training_step"] for r in _metric_rows(stopped)] == [0, 1, 2, 3]
    assert _metric_rows(stopped)[3] == _metric_rows(straight)[3]
