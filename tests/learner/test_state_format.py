"""The learner's training state: keyed by parameter name, and a round trip through the state
files (`rlvr.checkpoint.state`) continues bit for bit, also from a state saved before the first
optimizer step."""

from __future__ import annotations

import pytest
import torch

from rlvr.algorithm.losses import LossParams, PolicyLoss
from rlvr.algorithm.packing import SequenceToPack, pack_sequences
from rlvr.learner import Learner, LearnerSettings, LearnerState, UpdateResult
from rlvr.models import load_causal_lm
from rlvr.checkpoint.state import TrainingState, capture_rng, load_latest_state, save_state

ADAMW_ENTRY = {"step", "exp_avg", "exp_avg_sq"}


def _batch(seed: int):
    gen = torch.Generator().manual_seed(seed)
    seqs = []
    for i in range(6):
        p, r = 4 + i % 3, 3 + (i * 5) % 7
        seqs.append(SequenceToPack(torch.randint(3, 250, (p,), generator=gen).tolist(),
                                   torch.randint(3, 250, (r,), generator=gen).tolist(),
                                   [-5.0] * r, advantage=(-1.0) ** i * (1 + i / 10), index=i))
    return pack_sequences(seqs, pack_length=24)


def _learner(model_dir: str) -> Learner:
    settings = LearnerSettings(learning_rate=1e-3, lr_scheduler_type="linear", warm_up_steps=2,
                               total_optimizer_steps=10, weight_decay=0.01)
    policy = load_causal_lm(model_dir)
    return Learner(policy, Learner.frozen_copy(policy), settings)


def _update(learner: Learner, seed: int) -> UpdateResult:
    batch = _batch(seed)
    params = LossParams(clip_lower=0.2, clip_higher=0.28, beta=0.1, kl_estimator=2,
                        denominator=float(batch.num_response_tokens))
    return learner.update(batch, PolicyLoss("dapo", params), num_micro_batches=2, num_epochs=2,
                          temperature=1.0)


def _through_files(state: LearnerState, state_dir) -> LearnerState:
    """Saved and loaded as the trainer does, which also copies the live tensors."""
    save_state(TrainingState(step=1, episode=0, mixer={}, rng=capture_rng(), **state), state_dir)
    loaded = load_latest_state(state_dir)
    return {"policy": loaded.policy, "reference": loaded.reference,
            "optimizer": loaded.optimizer, "scheduler": loaded.scheduler}


def _assert_same_weights(a: Learner, b: Learner) -> None:
    wa, wb = dict(a.named_weights()), dict(b.named_weights())
    assert wa.keys() == wb.keys()
    assert all(torch.equal(wa[name], wb[name]) for name in wa)


def test_the_state_is_keyed_by_parameter_name(tiny_model_dir):
    learner = _learner(tiny_model_dir)
    _update(learner, seed=1)
    state = learner.training_state()
    names = [name for name, _ in learner.policy.named_parameters()]  # a tied weight once
    assert set(state) == {"policy", "reference", "optimizer", "scheduler"}
    assert state["policy"].keys() == learner.policy.state_dict().keys()
    assert state["reference"].keys() == state["policy"].keys()
    optimizer = state["optimizer"]
    assert sorted(optimizer["state"]) == sorted(names)  # in the order of the groups
    assert all(entry.keys() == ADAMW_ENTRY for entry in optimizer["state"].values())
    # Two groups: matrices decayed, biases and norm weights not (`rlvr.learner.weight_decay`).
    decayed, kept = optimizer["param_groups"]
    assert sorted(decayed["params"] + kept["params"]) == sorted(names)
    assert decayed["weight_decay"] == 0.01 and kept["weight_decay"] == 0.0
    assert all("norm" in name for name in kept["params"])
    assert state["scheduler"] == learner.scheduler.state_dict()


def test_a_round_trip_through_files_continues_bit_for_bit(tiny_model_dir, tmp_path):
    straight = _learner(tiny_model_dir)
    _update(straight, seed=1)
    saved = _through_files(straight.training_state(), tmp_path)
    resumed = _learner(tiny_model_dir)
    resumed.load_training_state(saved)
    _assert_same_weights(resumed, straight)
    for seed in (2, 3):
        want, got = _update(straight, seed), _update(resumed, seed)
        assert (got.loss_sums, got.grad_norm, got.learning_rate) == (
            want.loss_sums, want.grad_norm, want.learning_rate)
    _assert_same_weights(resumed, straight)


def test_a_state_saved_before_the_first_step_changes_nothing(tiny_model_dir, tmp_path):
    """Reading the state leaves an optimizer that never stepped untouched (no step count of 1
    creeps into its bias correction), and such a state loads as a fresh optimizer."""
    saving, unsaved, resumed = (_learner(tiny_model_dir) for _ in range(3))
    saving.skip_update(1)  # the schedule moved; the optimizer never stepped
    unsaved.skip_update(1)
    saved = _through_files(saving.training_state(), tmp_path)
    assert saved["optimizer"]["state"] == {} and not saving.optimizer.state
    resumed.load_training_state(saved)
    assert not resumed.optimizer.state
    assert resumed.scheduler.get_last_lr() == unsaved.scheduler.get_last_lr()
    for learner in (saving, unsaved, resumed):
        _update(learner, seed=1)
    _assert_same_weights(saving, unsaved)
    _assert_same_weights(resumed, unsaved)


def test_an_optimizer_state_keyed_by_index_is_refused(tiny_model_dir):
    learner = _learner(tiny_model_dir)
    _update(learner, seed=1)
    state = learner.training_state()
    state["optimizer"] = learner.optimizer.state_dict()  # the format before names
    with pytest.raises(ValueError, match="keyed by parameter index"):
        _learner(tiny_model_dir).load_training_state(state)
