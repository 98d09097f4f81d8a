"""Checkpointing and the micro-batch budget chosen from measured memory: the fit and the choice
against hand-worked numbers, and the learner's probe passes (on CPU, with the device's
allocator figures faked: the passes are real, the bytes are not). The CUDA allocator's own
figures are `tests/gpu`'s."""

import pytest
import torch

from rlvr.device import DeviceMemory
from rlvr.learner import Learner
from rlvr.learner import learner as learner_module
from rlvr.learner import memory_plan
from rlvr.learner.memory_plan import (GIB, MemoryFit, MemoryPlanError, MemoryProbe,
                                      plan_memory, probe_rows)
from tests.learner.test_learner import _batch, _loss_fn, _settings

MIB = 2 ** 20


def test_a_line_through_two_probes_says_how_many_rows_fit():
    # 10 GiB at 4,096 tokens, 18 GiB at 8,192: 2 MiB a token, and 18 - 16 = 2 GiB fixed.
    fit = MemoryFit.through(MemoryProbe(4096, 10 * GIB), MemoryProbe(8192, 18 * GIB))
    assert fit.per_token_bytes == 2 * MIB and fit.fixed_bytes == 2 * GIB
    # 34 GiB free: 32 GiB beyond the fixed part, 8 GiB a row of 4,096 tokens: 4 rows.
    assert fit.rows_that_fit(34 * GIB, 4096) == 4
    assert fit.rows_that_fit(34 * GIB - 1, 4096) == 3
    assert fit.rows_that_fit(GIB, 4096) == 0


def test_a_flat_reading_cannot_promise_unbounded_micro_batches():
    # The second probe no larger than the first (noise): the slope is taken as half the larger
    # probe's average, 10 GiB / 8,192 / 2 = 0.625 MiB a token, not 0.
    fit = MemoryFit.through(MemoryProbe(4096, 10 * GIB), MemoryProbe(8192, 10 * GIB))
    assert fit.per_token_bytes == pytest.approx(10 * GIB / 8192 / 2)
    with pytest.raises(ValueError, match="more tokens"):
        MemoryFit.through(MemoryProbe(8192, GIB), MemoryProbe(4096, GIB))


def _probe_fn(per_token_mib: dict[bool, float], fixed_gib: float = 1.0, calls=None):
    """A probe whose bytes follow a line, steeper without checkpointing."""
    def probe(rows: int, checkpointing: bool) -> MemoryProbe:
        if calls is not None:
            calls.append(("probe", rows, checkpointing))
        tokens = rows * 1024
        return MemoryProbe(tokens, int(fixed_gib * GIB + per_token_mib[checkpointing] * MIB
                                       * tokens))
    return probe


def test_without_checkpointing_when_a_row_fits_and_as_many_rows_as_fit():
    calls = []
    probe = _probe_fn({False: 2.0, True: 0.5}, calls=calls)
    # 1 GiB fixed + 2 MiB x 1,024 tokens = 3 GiB a row without checkpointing; 8 GiB free: the
    # fixed GiB and three rows of 2 GiB.
    plan = plan_memory(probe, lambda: calls.append("room") or 8 * GIB, 1024, None, None)
    assert (plan.gradient_checkpointing, plan.max_tokens_per_micro_batch) == (False, 3 * 1024)
    assert calls == [("probe", 1, False), ("probe", 2, False), "room"]  # room read after


def test_checkpointing_when_no_row_fits_without_it():
    probe = _probe_fn({False: 8.0, True: 1.0})
    # Without: 1 + 8 = 9 GiB a row > 6 GiB. With: 1 GiB a row, 5 rows.
    plan = plan_memory(probe, lambda: 6 * GIB, 1024, None, None)
    assert (plan.gradient_checkpointing, plan.max_tokens_per_micro_batch) == (True, 5 * 1024)
    assert "with activation checkpointing" in plan.describe()


def test_what_the_config_fixed_stays():
    probe = _probe_fn({False: 2.0, True: 0.5})
    assert plan_memory(probe, lambda: 100 * GIB, 1024, True, None).gradient_checkpointing
    # A fixed budget of 3 rows that fits only with checkpointing: checkpointing, that budget.
    plan = plan_memory(probe, lambda: 5 * GIB, 1024, None, 3 * 1024)
    assert (plan.gradient_checkpointing, plan.max_tokens_per_micro_batch, plan.fits) == (
        True, 3 * 1024, True)
    # A fixed budget that fits with nothing: kept, and said.
    plan = plan_memory(probe, lambda: 2 * GIB, 1024, True, 4 * 1024)
    assert (plan.max_tokens_per_micro_batch, plan.fits) == (4 * 1024, False)
    assert "more than that fit allows" in plan.describe()


def test_no_row_that_fits_stops_the_run_saying_what_to_change():
    with pytest.raises(MemoryPlanError, match="pack_length.*model.max_memory_gb") as e:
        plan_memory(_probe_fn({False: 8.0, True: 4.0}), lambda: 2 * GIB, 1024, None, None)
    assert "with activation checkpointing" in str(e.value)
    with pytest.raises(MemoryPlanError, match="model.gradient_checkpointing=true"):
        plan_memory(_probe_fn({False: 8.0, True: 4.0}), lambda: 2 * GIB, 1024, False, None)


def test_probe_rows_fill_each_row_with_response_tokens():
    batch = probe_rows(2, 64, vocab_size=100)
    assert batch.input_ids_RL.shape == (2, 64)
    assert batch.num_tokens == 128 and batch.num_response_tokens == 2 * 63
    assert torch.equal(batch.input_ids_RL, probe_rows(2, 64, vocab_size=100).input_ids_RL)


class _FakeDevice:
    """Allocator figures for a CPU learner: a probe pass's peak follows a line in its tokens,
    steeper without checkpointing; `free_gib` is what is free."""

    def __init__(self, monkeypatch, free_gib: float, per_token_mib: dict[bool, float]):
        self.probes: list[tuple[int, bool]] = []
        real_probe_pass = memory_plan.probe_pass
        memory = DeviceMemory(allocated=0, free=int(free_gib * GIB), total=int(100 * GIB))

        def probe_pass(model, forward_fn, autocast, batch, device):
            real_probe_pass(model, forward_fn, autocast, batch, device)  # the passes run
            checkpointing = model.is_gradient_checkpointing
            self.probes.append((batch.num_tokens, checkpointing))
            return MemoryProbe(batch.num_tokens,
                               int(GIB + per_token_mib[checkpointing] * MIB * batch.num_tokens))

        monkeypatch.setattr(memory_plan, "reset_peak_memory", lambda device: 0)
        monkeypatch.setattr(memory_plan, "peak_memory", lambda device: 0)
        monkeypatch.setattr(memory_plan, "device_memory", lambda device: memory)
        monkeypatch.setattr(learner_module, "device_memory", lambda device: memory)
        monkeypatch.setattr(learner_module, "probe_pass", probe_pass)


def _update(learner, batch):
    return learner.update(batch, _loss_fn(batch), num_micro_batches=1, num_epochs=1,
                          temperature=1.0)


def test_the_first_update_plans_and_the_probes_leave_no_trace(tiny_model_dir, monkeypatch):
    """Checkpointing and budget null: the first update probes, then trains exactly as a learner
    given the chosen values (same loss, same weights): no gradient, optimizer state or global
    RNG draw of the probes survives."""
    from rlvr.models import load_causal_lm

    batch = _batch(n=8, pack_length=24)
    # Rows of 48 tokens. Free: the optimizer's pending state (2 x 4 bytes a parameter) and the
    # margin (8% of 100 GiB), then the fixed GiB and 2.5 rows at 4 MiB a token: 2 rows fit.
    model = load_causal_lm(tiny_model_dir)
    pending_gib = 2 * sum(p.numel() * 4 for p in model.parameters()) / GIB
    free_gib = pending_gib + 100 * memory_plan.MARGIN_FRACTION + 1 + 2.5 * 48 * 4 / 1024
    fake = _FakeDevice(monkeypatch, free_gib, {False: 4.0, True: 1.0})
    planned = Learner(model, None, _settings(gradient_checkpointing=None, pack_length=48))
    rng = torch.get_rng_state()
    planned_result = _update(planned, batch)
    assert torch.equal(torch.get_rng_state(), rng)
    assert fake.probes == [(48, False), (48, False), (96, False)]  # unmeasured first
    assert planned.memory_plan.gradient_checkpointing is False
    assert planned.settings.max_tokens_per_micro_batch == 2 * 48
    assert not model.is_gradient_checkpointing

    fixed_model = load_causal_lm(tiny_model_dir)
    fixed = Learner(fixed_model, None, _settings(max_tokens_per_micro_batch=2 * 48))
    fixed_result = _update(fixed, batch)
    assert planned_result.loss_sums == pytest.approx(fixed_result.loss_sums, rel=1e-6)
    for p, q in zip(model.parameters(), fixed_model.parameters()):
        torch.testing.assert_close(p, q, rtol=1e-5, atol=1e-7)
    fake.probes.clear()
    _update(planned, batch)
    assert fake.probes == []  # planned once


def test_checkpointing_is_turned_on_when_a_row_fits_only_with_it(tiny_model_dir, monkeypatch):
    from rlvr.models import load_causal_lm

    model = load_causal_lm(tiny_model_dir)
    pending_gib = 2 * sum(p.numel() * 4 for p in model.parameters()) / GIB
    # 1.2 GiB for the probes' line: 1 GiB fixed, then 48 MiB a row at 1 MiB a token with
    # checkpointing, but about 4 GiB a row without.
    fake = _FakeDevice(monkeypatch, pending_gib + 100 * memory_plan.MARGIN_FRACTION + 1.2,
                       {False: 85.0, True: 1.0})
    learner = Learner(model, None, _settings(gradient_checkpointing=None, pack_length=48))
    _update(learner, _batch())
    assert learner.memory_plan.gradient_checkpointing and model.is_gradient_checkpointing
    assert [c for _, c in fake.probes] == [False] * 3 + [True] * 3


def test_nothing_is_planned_where_the_device_has_no_allocator_figures(tiny_model, monkeypatch):
    """On CPU (no allocator figures) null checkpointing is off and no probe runs."""
    monkeypatch.setattr(learner_module, "probe_pass",
                        lambda *a: pytest.fail("a probe ran on CPU"))
    learner = Learner(tiny_model, None, _settings(gradient_checkpointing=None, pack_length=48))
    _update(learner, _batch())
    assert learner.memory_plan is None and not tiny_model.is_gradient_checkpointing
    assert learner.settings.max_tokens_per_micro_batch is None


def test_ranks_decide_on_the_fewest_rows_any_of_them_fits():
    """This rank fits 3 rows without checkpointing, another none: agreed, both checkpoint."""
    calls = []
    agreed = {False: 0, True: 2}

    def agree(rows: int) -> int:
        calls.append(rows)
        return min(rows, agreed[len(calls) > 1])

    plan = plan_memory(_probe_fn({False: 2.0, True: 0.5}), lambda: 8 * GIB, 1024, None, None,
                       agree)
    assert (plan.gradient_checkpointing, plan.max_tokens_per_micro_batch) == (True, 2 * 1024)
    assert calls == [3, 14]  # this rank's own: 3 rows without, (8 - 1) / 0.5 = 14 with


def test_a_lora_policy_planned_into_checkpointing_trains_its_adapters_as_without(
        tiny_model_dir, monkeypatch):
    """The plan turns checkpointing on for a LoRA policy (frozen base embeddings, so the
    checkpointed layers' inputs carry no gradient): its adapters get the gradient they get
    without checkpointing."""
    from rlvr.models import load_causal_lm
    from tests.learner.test_lora import _lora, _randomize_b

    batch = _batch()
    grads = []
    for planned in (False, True):
        if planned:
            _FakeDevice(monkeypatch, 100 * memory_plan.MARGIN_FRACTION + 1.2,
                        {False: 85.0, True: 1.0})
        policy = _lora(load_causal_lm(tiny_model_dir))
        _randomize_b(policy)
        learner = Learner(policy, None, _settings(gradient_checkpointing=None if planned
                                                  else False, pack_length=48))
        learner.optimizer.step = lambda: grads.append(
            [p.grad.clone() for p in learner.trainable])
        _update(learner, batch)
        assert policy.is_gradient_checkpointing == planned
    for plain, checkpointed in zip(*grads):
        torch.testing.assert_close(checkpointed, plain, atol=1e-6, rtol=1e-5)
