"""The trainer's view of a `LearnerGroup`: `rlvr.learner.LearnerProtocol`, as `Learner` is.

The loop calls `update(batch, loss, ...)` with a `PolicyLoss` (picklable, so it travels to the
ranks as its name and parameters), syncs engines after each update, and saves checkpoints from
`policy`. Two ways to sync (`rlvr.rollout.weight_sync.sync_weights` picks):
- engines in the driver: `named_weights()` brings rank 0's gathered weights here;
- engine actors: `broadcast_to(engines)` sends them from rank 0 straight to the engines.
`policy` is the driver's own copy of the model. It is refreshed from rank 0 when read after an
update it has not seen, so checkpoints cost a gather only when one is saved, and a checkpoint
and the engines always hold the same weights. With LoRA it is wrapped as the ranks' policies
are (same names), so checkpoints hold the adapter and engines here get it merged.

`training_state` / `load_training_state` carry the exact-resume state of every rank through
rank 0, in `Learner`'s format (`LearnerState`, keyed by parameter name): a state saved by either
learner resumes in the other, on any number of ranks. `save_sharded_state` /
`load_sharded_state` instead have every rank write and read its own shards
(`rlvr.checkpoint.sharded`), nothing passing through rank 0 or the driver; their directory must
be on a filesystem every rank reaches.
"""

from __future__ import annotations

import os
from typing import Any, Iterator

import torch

from rlvr.algorithm.losses import PolicyLoss
from rlvr.distributed.engine_group import EngineGroup
from rlvr.distributed.learner_group import LearnerGroup
from rlvr.learner import LearnerState, MiniBatch, UpdateResult
from rlvr.learner.lora import engine_weights, is_lora
from rlvr.types import PackedBatch


class GroupLearner:
    def __init__(self, group: LearnerGroup, policy: torch.nn.Module):
        self.group = group
        self._policy = policy.eval().requires_grad_(False)  # the driver never trains it
        self._policy_stale = False  # the ranks updated since `_policy` was last refreshed

    @property
    def policy(self) -> torch.nn.Module:
        if self._policy_stale:
            self.named_weights()
        return self._policy

    def update(self, batch: PackedBatch, loss: PolicyLoss, num_micro_batches: int,
               num_epochs: int, temperature: float) -> UpdateResult:
        self._policy_stale = True
        return self.group.update(batch, loss.name, loss.params, num_micro_batches, num_epochs,
                                 temperature)

    def update_mini_batches(self, mini_batches: list[MiniBatch], num_epochs: int,
                            temperature: float) -> UpdateResult:
        """Each mini-batch's loss must be a `PolicyLoss` (it travels to the ranks)."""
        self._policy_stale = True
        return self.group.update_mini_batches(mini_batches, num_epochs, temperature)

    def skip_update(self, num_epochs: int) -> None:
        self.group.skip_update(num_epochs)

    def update_reference(self, alpha: float) -> None:
        self.group.update_reference(alpha)

    @torch.no_grad()
    def named_weights(self) -> Iterator[tuple[str, torch.Tensor]]:
        weights = dict(self.group.named_weights())
        own = self._policy.state_dict()
        for name, tensor in weights.items():
            if name in own:
                own[name].copy_(tensor)
        self._policy_stale = False
        if is_lora(self._policy):  # the ranks sent adapters unmerged: engines want them merged
            return engine_weights(self._policy)
        return iter(weights.items())

    def training_state(self) -> LearnerState:
        """Policy, reference, optimizer (keyed by parameter name) and scheduler, gathered on
        rank 0: restorable into a group of any size, or a `Learner`."""
        return self.group.state_dict()

    def load_training_state(self, state: LearnerState) -> None:
        self.group.load_state_dict(state)
        self._policy_stale = True

    def save_sharded_state(self, directory: str | os.PathLike, extra: dict[str, Any]) -> None:
        """The ranks write their own shards, and rank 0 `extra`, into `directory`
        (`rlvr.checkpoint.sharded`); it must be on a filesystem every rank reaches."""
        self.group.save_sharded_state(directory, extra)

    def load_sharded_state(self, directory: str | os.PathLike) -> dict[str, Any]:
        """Restore a sharded state saved by any number of ranks (or a `Learner`); returns its
        `extra`."""
        extra = self.group.load_sharded_state(directory)
        self._policy_stale = True
        return extra

    def broadcast_to(self, engines: EngineGroup, version: int) -> None:
        """Rank 0 gathers and broadcasts to the engine actors; nothing passes through here.
        The first call forms the broadcast group at an endpoint on rank 0's node, and so does
        the first after the engines changed (one lost, one started: `engine_membership`)."""

        def sync() -> None:
            if engines.endpoint_unset:
                engines.set_endpoint(self.group.weight_sync_endpoint())
            endpoint = engines.endpoint()
            engines.receive_while(
                lambda: self.group.push_weights(version, endpoint, engines.num_receivers,
                                                engines.bucket_bytes, engines.weight_dtype))

        engines.sync_with_retries(sync)

    def close(self) -> None:
        """Stop every rank (safe to call twice)."""
        self.group.close()
