"""The trainer's view of a `LearnerGroup`: the surface of `Learner` the training loop uses.

The loop calls `update(batch, loss, ...)` with a `PolicyLoss` (picklable, so it travels to the
ranks as its name and parameters), `named_weights()` after each update to sync engines, and
saves checkpoints from `policy`. Here `policy` is the driver's own copy of the model, refreshed
from rank 0's gathered weights at every `named_weights()` call, so saving a checkpoint needs no
extra collective and the engine and the checkpoint see the same weights.

Not here: exact-resume training state (optimizer, RNGs) across several learners; the config
refuses `checkpoint.checkpoint_state_freq` with the ray launcher until it is wired.
"""

from __future__ import annotations

from typing import Iterator

import torch

from rlvr.algorithm.losses import PolicyLoss
from rlvr.distributed.learner_group import LearnerGroup
from rlvr.learner import UpdateResult
from rlvr.types import PackedBatch


class GroupLearner:
    def __init__(self, group: LearnerGroup, policy: torch.nn.Module):
        self.group = group
        self.policy = policy.eval().requires_grad_(False)  # the driver never trains it

    def update(self, batch: PackedBatch, loss: PolicyLoss, num_micro_batches: int,
               num_epochs: int, temperature: float) -> UpdateResult:
        return self.group.update(batch, loss.name, loss.params, num_micro_batches, num_epochs,
                                 temperature)

    def update_reference(self, alpha: float) -> None:
        self.group.update_reference(alpha)

    @torch.no_grad()
    def named_weights(self) -> Iterator[tuple[str, torch.Tensor]]:
        weights = dict(self.group.named_weights())
        own = self.policy.state_dict()
        for name, tensor in weights.items():
            if name in own:
                own[name].copy_(tensor)
        return iter(weights.items())

    def close(self) -> None:
        self.group.close()
