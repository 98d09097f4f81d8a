"""The driver's handle on N engine actors, with the `RolloutEngine` surface the trainer uses.

`generate` cuts the prompts into N contiguous shares, one per engine, and joins the answers in
prompt order. Weights reach the engines by a torch.distributed broadcast (`weight_sync`), from
one of two senders:
- learner rank 0 after gathering the shards (`receive_while`, driven by `GroupLearner`), so full
  weights never pass through the driver: the trainer's path;
- this process (`update_weights`), when it holds the weights itself.

Failures are loud: an engine that raises or dies fails the call with `EngineGroupError` naming
the engine and carrying its traceback, and every engine actor is stopped.
Not here: which prompts to generate (the trainer), the learners (`LearnerGroup`).
"""

from __future__ import annotations

import logging
import math
from dataclasses import replace
from typing import Any, Callable, Iterable

import torch

from rlvr.config import RolloutConfig
from rlvr.distributed.engine_worker import Endpoint, EngineWorker
from rlvr.distributed.ray_session import ensure_ray, free_endpoint, thread_env
from rlvr.rollout.weight_sync import BroadcastTransport, layout_of
from rlvr.types import Completion, SamplingParams

log = logging.getLogger(__name__)

# Calls one engine actor runs at once: a generation, an evaluation, a weight receive, and one
# spare (the engines' locks order what must not overlap).
_ACTOR_CONCURRENCY = 4
# After a failed push, how long to wait for the engines' own errors before stopping them.
_SENDER_GRACE_S = 5.0


class EngineGroupError(RuntimeError):
    """An engine actor failed (raised or died); the group is stopped."""


def split_evenly(items: list, parts: int) -> list[list]:
    """Contiguous shares whose sizes differ by at most one; empty shares are dropped."""
    q, r = divmod(len(items), parts)
    shares, start = [], 0
    for i in range(parts):
        end = start + q + (1 if i < r else 0)
        if end > start:
            shares.append(items[start:end])
        start = end
    return shares


def share_params(params: SamplingParams, k: int) -> SamplingParams:
    """Share k's sampling: its own seed, or every engine would replay share 0's random stream
    on its prompts (share 0 keeps the seed, so one engine samples as an engine in process)."""
    if k == 0 or params.seed is None:
        return params
    return replace(params, seed=params.seed + 7_919 * k)


class EngineGroup:
    def __init__(self, num_engines: int, engine_name: str, model_dir: str, cfg: RolloutConfig,
                 eos_token_ids: tuple[int, ...], pad_token_id: int, num_threads: int = 0,
                 cpus_per_engine: float = 1.0, timeout_s: float = 600.0,
                 ray_address: str | None = None, worker_cls: type = EngineWorker):
        import ray

        if num_engines < 1:
            raise ValueError(f"an engine group needs at least one engine, not {num_engines}")
        ensure_ray(ray_address, math.ceil(num_engines * cpus_per_engine))
        self.num_engines, self.timeout_s = num_engines, timeout_s
        self._failure: str | None = None
        self._transport: BroadcastTransport | None = None  # when this process is the sender
        self._endpoint: Endpoint | None = None
        actor_cls = ray.remote(worker_cls).options(
            num_cpus=cpus_per_engine, max_concurrency=_ACTOR_CONCURRENCY, max_restarts=0,
            runtime_env=thread_env(num_threads))
        self._actors: list[Any] = [
            actor_cls.remote(engine_name, model_dir, cfg, eos_token_ids, pad_token_id,
                             num_threads)
            for _ in range(num_engines)]
        self._wait([a.ready.remote() for a in self._actors], "start", timeout_s=timeout_s)

    @classmethod
    def from_actors(cls, actors: list, timeout_s: float) -> "EngineGroup":
        """A handle on engine actors another process started (the data-preparation actor
        generates through it; the owner alone syncs weights and stops them)."""
        group = cls.__new__(cls)
        group.num_engines, group.timeout_s = len(actors), timeout_s
        group._failure, group._transport, group._endpoint = None, None, None
        group._actors = list(actors)
        return group

    @property
    def actors(self) -> list:
        return list(self._live())

    # ---- the RolloutEngine surface -------------------------------------------------------

    def generate(self, prompts: list[list[int]], params: SamplingParams) -> list[list[Completion]]:
        shares = split_evenly(list(prompts), self.num_engines)
        refs = [actor.generate.remote(share, share_params(params, k))
                for k, (actor, share) in enumerate(zip(self._live(), shares))]
        return [group for part in self._wait(refs, "generate") for group in part]

    def update_weights(self, named_tensors: Iterable[tuple[str, torch.Tensor]],
                       version: int) -> None:
        """Broadcast weights held by this process (it joins the group as the sender)."""
        named = list(named_tensors)

        def send() -> None:
            if self._transport is None:  # blocks until every engine has joined
                self._transport = BroadcastTransport(*self.endpoint(), self.num_engines,
                                                     layout_of(named), self.timeout_s)
            self._transport.push(named, version)

        self.receive_while(send)

    def close(self) -> None:
        import ray

        # No goodbye broadcast (`BroadcastTransport.close`): the engines only listen inside
        # `receive_weights`, so it would wait out the timeout; they are stopped instead.
        self._transport = None
        for actor in self._actors:
            try:
                ray.get(actor.close.remote(), timeout=30)
            except Exception as e:  # noqa: BLE001  stopping anyway; the run's error matters more
                log.debug("engine close: %s", e)
        self._kill_all()

    # ---- weight sync from any sender -----------------------------------------------------

    @property
    def endpoint_unset(self) -> bool:
        return self._endpoint is None

    def endpoint(self) -> Endpoint:
        """Where the sender serves the broadcast group, fixed at the first use: a port of this
        process unless `set_endpoint` gave one on the sender's node first."""
        if self._endpoint is None:
            self._endpoint = free_endpoint()
        return self._endpoint

    def set_endpoint(self, endpoint: Endpoint) -> None:
        if self._endpoint is not None and self._endpoint != tuple(endpoint):
            raise ValueError(f"the engines already receive from {self._endpoint}")
        self._endpoint = tuple(endpoint)

    def receive_while(self, send: Callable[[], None]) -> None:
        """Every engine waits for one push while `send()` makes it; returns once all loaded."""
        endpoint = self.endpoint()
        refs = [actor.receive_weights.remote(endpoint, rank + 1, self.num_engines,
                                             self.timeout_s)
                for rank, actor in enumerate(self._live())]
        try:
            send()
        except Exception:
            self._after_failed_send(refs)
            raise
        self._wait(refs, "weight sync")

    # ---- plumbing ------------------------------------------------------------------------

    def _after_failed_send(self, refs: list) -> None:
        """The sender failed: an engine's own error (it died) names the cause better, so raise
        that if one comes soon; either way stop the engines, which wait for a push that will
        never come."""
        import ray

        ready, _ = ray.wait(refs, num_returns=len(refs), timeout=_SENDER_GRACE_S)
        failed = [ref for ref in ready if _failed(ref)]
        if failed:
            self._wait(failed, "weight sync")  # raises EngineGroupError
        self._failure = "weight sync failed on the sender's side"
        self._kill_all()

    def _kill_all(self) -> None:
        import ray

        for actor in self._actors:
            ray.kill(actor, no_restart=True)
        self._actors = []

    def _live(self) -> list[Any]:
        if self._failure is not None:
            raise EngineGroupError(f"the engine group failed earlier: {self._failure}")
        if not self._actors:
            raise EngineGroupError("the engine group is closed")
        return self._actors

    def _wait(self, refs: list, what: str, timeout_s: float | None = None) -> list[Any]:
        import ray

        try:
            return ray.get(refs, timeout=timeout_s)
        except ray.exceptions.GetTimeoutError:
            self._failure = f"{what} did not finish within {timeout_s:.0f} s"
            self._kill_all()
            raise EngineGroupError(f"{self._failure}; cluster resources: "
                                   f"{ray.cluster_resources()}, free: "
                                   f"{ray.available_resources()}") from None
        except Exception as e:  # noqa: BLE001  RayTaskError carries the engine's traceback
            failed = next((i for i, ref in enumerate(refs) if _failed(ref)), None)
            where = f"engine actor {failed}" if failed is not None else "an engine actor"
            self._failure = f"{what} failed on {where}"
            log.error("%s; stopping every engine", self._failure)
            self._kill_all()
            raise EngineGroupError(f"{self._failure}: {type(e).__name__}: {e}") from None


def _failed(ref) -> bool:
    import ray

    try:
        ray.get(ref, timeout=0)
        return False
    except ray.exceptions.GetTimeoutError:
        return False
    except Exception:  # noqa: BLE001
        return True
