"""The records a learner hands the loop and takes from it: one optimizer step's mini-batch
(`MiniBatch`) and an update's sums (`UpdateResult`). They live apart from the implementation
(`rlvr.learner.learner`) so the protocol (`rlvr.learner.protocol`), the distributed learners and
the loop import them without importing a learner: no import cycle.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable

import torch

from rlvr.algorithm.losses import LossInputs, LossOutputs
from rlvr.types import PackedBatch

LossFn = Callable[[LossInputs], LossOutputs]


@dataclass
class UpdateResult:
    """Sums over all tokens of the update (divide by `num_response_tokens` for averages)."""

    loss_sums: dict[str, float]
    num_response_tokens: int
    num_tokens: int  # every non-padding token run through forward and backward
    num_sequences: int
    entropy_sum: float
    engine_diff_sum: float  # sum over response tokens of |local - engine| logprob, first epoch
    engine_diff_max: float
    grad_norm: float
    learning_rate: float
    skipped_steps: int
    seconds: float
    # `memory/*` gauges of the learner's device after the update (`rlvr.device`); across
    # ranks, the largest of each.
    memory: dict[str, float] = field(default_factory=dict)
    # sum over response tokens of KL(engine || local), k3 estimate, first epoch (as the diff)
    engine_kl_sum: float = 0.0
    # [T] exp(local - engine) per response token of the pre-update passes, on the host: the
    # importance ratio's distribution (`rlvr.metrics.distributions`); at most
    # MAX_RATIO_VALUES of them, an evenly strided sample past that, so a long batch costs a
    # bounded copy (and a bounded message from a learner rank). None: no tokens.
    engine_ratio_T: torch.Tensor | None = None



@dataclass(frozen=True)
class MiniBatch:
    """One optimizer step's share of a training batch (open-instruct's mini-batch): whole packed
    rows, the loss they train with, bound to this mini-batch's own denominator, and the
    micro-batches (forward/backward passes) its gradient accumulates over."""

    batch: PackedBatch
    loss: LossFn
    num_micro_batches: int = 1
