"""What the training loop needs from a learner, and the training state every learner shares.

Two learners satisfy `LearnerProtocol`: `rlvr.learner.Learner` (the policy in this process) and
`rlvr.distributed.GroupLearner` (FSDP2 ranks: Ray actors, or processes joined by
torch.distributed that the local launcher, torchrun or srun started; the trainer cannot tell
which). The loop holds one as `run.learner` and calls nothing else on it, so it needs no
`isinstance` to train, save, resume or close; a launcher-specific extra (such as
`GroupLearner.broadcast_to`) stays off this surface.

Both write and read one `LearnerState`, keyed by parameter NAME, so a state saved under one
launcher resumes under the other and on any number of ranks. This module holds no code that
builds or converts states: `Learner.training_state` does (`torch.distributed.checkpoint`'s
full state dicts, which also serve a sharded policy).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Iterator, Protocol, TypedDict, runtime_checkable

import torch

from rlvr.algorithm.losses import PolicyLoss
from rlvr.learner.records import MiniBatch, UpdateResult
from rlvr.types import PackedBatch


class LearnerState(TypedDict):
    """Exact-resume state of a learner, full (unsharded) and on CPU.

    - `policy`, `reference`: model state dicts, parameter name -> tensor (tied weights appear
      under each of their names, as `nn.Module.state_dict` gives them); `reference` is None
      without a reference model. A LoRA policy's holds its adapter weights only (PEFT's
      names), its frozen base being reloaded from the model directory.
    - `optimizer`: `{"state": {name: {"step": [], "exp_avg": [*shape], "exp_avg_sq": [*shape]}},
      "param_groups": [{"lr": ..., "betas": ..., ..., "params": [name, ...]}]}` for AdamW, as
      `torch.distributed.checkpoint.state_dict.get_optimizer_state_dict` returns it with
      `full_state_dict=True`: keyed by parameter name, a tied parameter once under its first
      name. `state` is empty until the first optimizer step.
    - `scheduler`: the LR scheduler's `state_dict()`.
    """

    policy: dict[str, torch.Tensor]
    reference: dict[str, torch.Tensor] | None
    optimizer: dict[str, Any]
    scheduler: dict[str, Any]


@runtime_checkable
class LearnerProtocol(Protocol):
    """The learner surface of the training loop (`rlvr.run.loop`)."""

    @property
    def policy(self) -> torch.nn.Module:
        """A full copy of the policy in this process, current as of the last update: what
        checkpoints save."""
        ...

    def update(self, batch: PackedBatch, loss: PolicyLoss, num_micro_batches: int,
               num_epochs: int, temperature: float) -> UpdateResult:
        """`num_epochs` optimizer steps over `batch`, each accumulating `num_micro_batches`
        parts; `loss.params.denominator` is the whole batch's count."""
        ...

    def update_mini_batches(self, mini_batches: list[MiniBatch], num_epochs: int,
                            temperature: float) -> UpdateResult:
        """`num_epochs` passes over `mini_batches`, one optimizer step per mini-batch
        (open-instruct's `num_mini_batches`); each mini-batch's loss carries its own
        denominator, its count over all ranks. What the trainer calls."""
        ...

    def skip_update(self, num_epochs: int) -> None:
        """Optimizer steps that have no batch (`num_epochs` of them): none is taken, but the
        schedule moves as if they had been."""
        ...

    def update_reference(self, alpha: float) -> None:
        """Polyak step of the frozen reference toward the policy."""
        ...

    def named_weights(self) -> Iterator[tuple[str, torch.Tensor]]:
        """The policy's full weights by name (checkpoints; engines, through
        `rlvr.rollout.weight_sync.sync_weights`, which picks the path)."""
        ...

    def training_state(self) -> LearnerState:
        """Everything exact resume needs; save it before the next update (tensors may be the
        live ones)."""
        ...

    def load_training_state(self, state: LearnerState) -> None:
        """Restore what any learner's `training_state` returned."""
        ...

    def save_sharded_state(self, directory: Path, extra: dict) -> None:
        """`checkpoint.state_format=sharded`: every rank writes its own shard of the same
        state into `directory` (`rlvr.checkpoint.sharded`), with `extra` saved once."""
        ...

    def load_sharded_state(self, directory: Path) -> dict:
        """Restore a sharded state written by any number of ranks; returns its `extra`."""
        ...

    def close(self) -> None:
        """Release what the learner holds (processes, process groups); safe to call twice."""
        ...
