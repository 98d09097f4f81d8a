"""Weight sync: the learner's weights into the engines after an update, without restarting
them. `sync_weights` is the one entry point (the loop after each update, a resume, the plan's
calibration); it picks the path and the modules below carry it.

Why a package of its own, under `rollout`: weight sync is the rollout side's intake. Its
senders run in several places (the trainer's process, learner rank 0, an engine-actor group's
driver), so no one of `learner`, `distributed` or the loop could own it without the others
reaching into it; and it depends only on the engine protocol and torch.distributed, so a
learner, an actor group and a server update all import it without importing each other.

The paths, shortest first:
- an engine in this process: `engine.update_weights(learner.named_weights(), version)`, a
  tensor copy;
- engine actors (`rlvr.distributed.engine_group.EngineGroup`) with a learner that can send from
  rank 0 (`GroupLearner.broadcast_to`): rank 0 gathers and broadcasts straight to the actors,
  nothing passing through this process; with a learner in this process the group broadcasts
  from here (its own `update_weights`). The wire: `broadcast` (buckets, plan, transport,
  receiver);
- inference servers (`rollout.engine=remote`): through the disk or a broadcast to the servers'
  workers, `servers`, which the remote engine's `update_weights` drives.

The receiving side is each engine's: `RolloutEngine.update_weights` in process,
`broadcast.BroadcastReceiver` in an engine actor, and an engine whose workers receive for
themselves provides `join_weight_group` / `receive_pushed_weights` and runs a receiver in each
worker, in its own subpackage (`rlvr.rollout.<engine>`). `tied` holds the one weight-stream
rule several receivers share.
"""

from __future__ import annotations

from typing import Any, Iterator, Protocol, runtime_checkable

import torch

from rlvr.rollout.base import RolloutEngine


class WeightSource(Protocol):
    """A learner, as weight sync sees it."""

    def named_weights(self) -> Iterator[tuple[str, torch.Tensor]]: ...


@runtime_checkable
class RankZeroSender(Protocol):
    """A learner whose rank 0 can broadcast to engine actors itself (`GroupLearner`)."""

    def broadcast_to(self, engines: Any, version: int) -> None: ...


@runtime_checkable
class BroadcastReceivers(Protocol):
    """Engines in other processes that receive a broadcast from any sender (`EngineGroup`)."""

    def receive_while(self, send: Any) -> None: ...

    def endpoint(self) -> tuple[str, int]: ...


def sync_weights(learner: WeightSource, engine: RolloutEngine, version: int) -> None:
    """Learner -> engine, as policy version `version`, by the shortest path the two allow."""
    if isinstance(engine, BroadcastReceivers) and isinstance(learner, RankZeroSender):
        learner.broadcast_to(engine, version)
    else:
        engine.update_weights(learner.named_weights(), version)
