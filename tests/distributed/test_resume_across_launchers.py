"""A training state crosses launchers: saved by a `Learner` in this process it resumes in a
`GroupLearner` of Ray actors (1 rank, and 2 FSDP2 ranks), and saved by the group it resumes in a
`Learner`; either way the next update lands within 1e-6 of the learner that did not stop.

One group per rank count walks three crossings: a fresh optimizer (saved before any step)
from one process to the group, the group's stepped state back to a new process, and that
process's state to the group again. Both sides write the same format, so their states have the
same structure at every crossing.
"""

from __future__ import annotations

from typing import Any

import pytest
import torch

from rlvr.algorithm.losses import LossParams, PolicyLoss
from rlvr.checkpoint.state import TrainingState, capture_rng, load_latest_state, save_state
from rlvr.distributed.learner_group import LearnerGroup
from rlvr.distributed.learner_worker import LearnerSpec
from rlvr.distributed.trainer_learner import GroupLearner
from rlvr.learner import Learner, LearnerProtocol, LearnerSettings, LearnerState
from rlvr.models import load_causal_lm
from tests.distributed.test_learner_group import _batch as grouped_batch

# Adam's first step moves a weight by about lr * g / (|g| + eps): with the default eps, gradients
# near 1e-8 turn the rounding differences of two ranks' summed gradients into weight differences
# near 1e-6 (8.6e-7 seen). eps=1e-6 keeps such steps proportional to their gradient (1.3e-7 seen).
SETTINGS = LearnerSettings(learning_rate=1e-3, lr_scheduler_type="linear", warm_up_steps=1,
                           total_optimizer_steps=10, max_grad_norm=1.0, eps=1e-6)


def _batch(seed: int):
    return grouped_batch(4, seed)


def _update(learner: LearnerProtocol, seed: int) -> None:
    batch = _batch(seed)
    params = LossParams(clip_lower=0.2, clip_higher=0.28, beta=0.1, kl_estimator=2,
                        denominator=float(batch.num_response_tokens))
    learner.update(batch, PolicyLoss("dapo", params), num_micro_batches=2, num_epochs=1,
                   temperature=1.0)


def _local_learner(model_dir: str) -> Learner:
    policy = load_causal_lm(model_dir)
    return Learner(policy, Learner.frozen_copy(policy), SETTINGS)


def _through_files(state: LearnerState, state_dir) -> LearnerState:
    """Saved and loaded as the trainer does."""
    save_state(TrainingState(step=1, episode=0, mixer={}, rng=capture_rng(), **state), state_dir)
    loaded = load_latest_state(state_dir)
    return {"policy": loaded.policy, "reference": loaded.reference,
            "optimizer": loaded.optimizer, "scheduler": loaded.scheduler}


def _structure(state: LearnerState) -> dict[str, Any]:
    """Every key and tensor shape of a state, without the numbers."""
    optimizer = state["optimizer"]
    return {
        "policy": {name: t.shape for name, t in state["policy"].items()},
        "reference": {name: t.shape for name, t in state["reference"].items()},
        "optimizer_state": {name: {k: v.shape for k, v in entry.items()}
                            for name, entry in optimizer["state"].items()},
        "param_groups": [(sorted(g), g["params"]) for g in optimizer["param_groups"]],
        "scheduler": sorted(state["scheduler"]),
    }


def _assert_close_weights(got: LearnerProtocol, want: LearnerProtocol) -> None:
    wg, ww = dict(got.named_weights()), dict(want.named_weights())
    assert wg.keys() == ww.keys()
    for name in ww:
        torch.testing.assert_close(wg[name], ww[name], atol=1e-6, rtol=0, msg=name)


@pytest.mark.parametrize("num_learners", [1, 2])
def test_a_state_resumes_under_the_other_launcher(ray_session, tiny_model_dir, tmp_path,
                                                  num_learners):
    spec = LearnerSpec(model_dir=tiny_model_dir, settings=SETTINGS, sharding="fsdp",
                       with_reference=True, timeout_s=60)
    local = _local_learner(tiny_model_dir)
    group = GroupLearner(LearnerGroup(spec, num_learners, backend="ray"),
                         load_causal_lm(tiny_model_dir))
    try:
        assert isinstance(group, LearnerProtocol)
        # 1. Saved in this process before any optimizer step, resumed by the group.
        local.skip_update(1)
        group.load_training_state(_through_files(local.training_state(), tmp_path / "a"))
        assert group.training_state()["optimizer"]["state"] == {}
        _update(local, seed=0)
        _update(group, seed=0)
        _assert_close_weights(group, local)
        # 2. The group's state, resumed in a new process.
        from_group = group.training_state()
        resumed = _local_learner(tiny_model_dir)
        resumed.load_training_state(_through_files(from_group, tmp_path / "b"))
        _update(group, seed=1)
        _update(resumed, seed=1)
        _assert_close_weights(resumed, group)
        # 3. That process's state, resumed by the group again.
        from_local = resumed.training_state()
        assert _structure(from_local) == _structure(from_group)
        group.load_training_state(_through_files(from_local, tmp_path / "c"))
        _update(resumed, seed=2)
        _update(group, seed=2)
        _assert_close_weights(group, resumed)
    finally:
        group.close()
