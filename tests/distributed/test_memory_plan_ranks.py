"""The memory plan across learner ranks: the ranks agree on the fewest rows any fits (a real
all-reduce over gloo, two processes), and a learner group plans once, before its first update,
and cuts batches with the plan's budget (in process, the device's allocator figures faked as
in tests/learner/test_memory_plan.py)."""

from __future__ import annotations

import dataclasses
import types

import pytest
import torch
import torch.multiprocessing as mp

from rlvr.algorithm.losses import LossParams
from rlvr.device import Device
from rlvr.distributed import LearnerGroup
from rlvr.distributed.learner_worker import LearnerWorker
from rlvr.learner.memory_plan import GIB, MemoryPlanError, plan_memory
from tests.distributed.test_learner_group import _batch, _spec
from tests.learner.test_memory_plan import _FakeDevice, _probe_fn


def _rank_plans(rank: int, init_file: str, per_token_mib: float, results) -> None:
    torch.distributed.init_process_group("gloo", init_method=f"file://{init_file}", rank=rank,
                                         world_size=2)
    try:
        worker = types.SimpleNamespace(world_size=2, device=Device("cpu"))
        plan = plan_memory(_probe_fn({False: per_token_mib, True: 0.5}), lambda: 8 * GIB, 1024,
                           None, None, lambda rows: LearnerWorker._fewest_rows(worker, rows))
        results.put((rank, plan.gradient_checkpointing, plan.max_tokens_per_micro_batch))
    finally:
        torch.distributed.destroy_process_group()


@pytest.mark.component
def test_two_ranks_with_different_room_decide_alike(tmp_path):
    """Rank 0 fits 3 rows without checkpointing (2 MiB a token), rank 1 none (8 MiB): both
    checkpoint, and both take the rows rank 1 fits with it."""
    ctx = mp.get_context("spawn")
    results = ctx.Queue()
    ranks = [ctx.Process(target=_rank_plans, args=(r, str(tmp_path / "init"), mib, results))
             for r, mib in enumerate((2.0, 8.0))]
    for p in ranks:
        p.start()
    got = sorted(results.get(timeout=120) for _ in ranks)
    for p in ranks:
        p.join(timeout=30)
    assert got == [(0, True, 14 * 1024), (1, True, 14 * 1024)]


def _update_planning_group(group: LearnerGroup, num_groups: int) -> None:
    batch = _batch(num_groups=num_groups, seed=0)
    params = LossParams(0.2, 0.28, 0.0, 2, float(batch.num_response_tokens))
    group.update(batch, "dapo", params, num_micro_batches=1, num_epochs=1, temperature=1.0)


def _planning_group(model_dir: str) -> LearnerGroup:
    """One in-process rank whose checkpointing and budget are left to the memory plan, in
    rows of 40 tokens."""
    spec = _spec(model_dir)
    return LearnerGroup(dataclasses.replace(spec, settings=dataclasses.replace(
        spec.settings, gradient_checkpointing=None, pack_length=40)), num_learners=1,
        backend="local")


def test_a_group_plans_before_its_first_update_and_cuts_with_the_budget(tiny_model_dir,
                                                                        monkeypatch):
    fake = _FakeDevice(monkeypatch, 100 * 0.08 + 1 + 1.0, {False: 4.0, True: 1.0})
    with _planning_group(tiny_model_dir) as group:
        _update_planning_group(group, num_groups=6)
        planned = group.spec.settings
        assert planned.gradient_checkpointing is False
        assert planned.max_tokens_per_micro_batch is not None
        assert planned.max_tokens_per_micro_batch % 40 == 0
        assert len(fake.probes) == 3
        _update_planning_group(group, num_groups=6)
        assert len(fake.probes) == 3  # planned once


def test_no_row_that_fits_on_the_ranks_stops_the_group_with_the_plan_error(tiny_model_dir,
                                                                           monkeypatch):
    """Every rank finds it alike; the driver raises it as it is (exit 2 in the CLI), not as a
    failed rank."""
    _FakeDevice(monkeypatch, 100 * 0.08 + 0.5, {False: 64.0, True: 16.0})
    with _planning_group(tiny_model_dir) as group:
        with pytest.raises(MemoryPlanError, match="one packed row of 40 tokens"):
            _update_planning_group(group, num_groups=2)
