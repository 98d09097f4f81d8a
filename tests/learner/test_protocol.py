"""Both learners offer the training loop's surface under the same names and parameters."""

from __future__ import annotations

import inspect

import pytest

from rlvr.distributed.trainer_learner import GroupLearner
from rlvr.learner import Learner, LearnerProtocol, LearnerSettings
from rlvr.models import load_causal_lm

METHODS = ["update", "update_mini_batches", "skip_update", "update_reference", "named_weights",
           "training_state", "load_training_state", "close"]


def _parameters(cls: type, method: str) -> list[tuple[str, inspect._ParameterKind]]:
    return [(p.name, p.kind) for p in inspect.signature(getattr(cls, method)).parameters.values()]


@pytest.mark.parametrize("cls", [Learner, GroupLearner])
@pytest.mark.parametrize("method", METHODS)
def test_methods_take_the_protocols_parameters(cls, method):
    assert _parameters(cls, method) == _parameters(LearnerProtocol, method)


def test_a_learner_is_one_and_closes_as_a_no_op(tiny_model_dir):
    settings = LearnerSettings(learning_rate=1e-3, lr_scheduler_type="constant",
                               warm_up_steps=0, total_optimizer_steps=1)
    learner = Learner(load_causal_lm(tiny_model_dir), None, settings)
    assert isinstance(learner, LearnerProtocol)
    learner.close()
    learner.close()
    assert dict(learner.named_weights())  # still usable
