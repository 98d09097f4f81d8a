"""The driver's handle on N engine actors, with the `RolloutEngine` surface the trainer uses.

`generate` cuts the prompts into N contiguous shares, one per engine started (each with its own
seed), and joins the answers in prompt order; while engines are lost the shares are dealt over
those left. Weights reach the engines by a torch.distributed broadcast
(`rlvr.rollout.weight_sync`, whose `sync_weights` picks the sender), from
one of two senders:
- learner rank 0 after gathering the shards (`receive_while`, driven by `GroupLearner`), so full
  weights never pass through the driver: the trainer's path;
- this process (`update_weights`), when it holds the weights itself.

Failures are loud (`actor_calls.ActorGroup`): an engine that raises fails the call with
`EngineGroupError` naming the engine and carrying its traceback, and every engine actor is
stopped. An engine that dies (its node lost) does not, while others live: the group started
here goes on with those left and takes engines back when Ray has room again
(`engine_membership`); the last one lost is `EngineGroupError`. A group made `from_actors`
another process started fails on any death, as it cannot restart them.
Not here: which prompts to generate (the trainer), the learners (`LearnerGroup`).
"""

from __future__ import annotations

import logging
import math
from dataclasses import replace
from typing import Callable, Iterable

import torch

from rlvr.distributed.actor_calls import ActorFailure, ActorGroup
from rlvr.distributed.engine_membership import EngineActor, EngineMembership, EnginesLost
from rlvr.distributed.engine_worker import Endpoint, EngineWorker
from rlvr.distributed.ray_session import ensure_ray, free_endpoint, thread_env
from rlvr.models import DTYPES
from rlvr.rollout.base import EngineSettings, engine_record
from rlvr.rollout.seeds import derive_seed
from rlvr.rollout.weight_sync.broadcast import DEFAULT_BUCKET_BYTES, BroadcastTransport, layout_of
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
    return replace(params, seed=derive_seed(params.seed, share=k))


class EngineGroup:
    def __init__(self, num_engines: int, engine_name: str, model_dir: str, cfg: EngineSettings,
                 eos_token_ids: tuple[int, ...], pad_token_id: int, num_threads: int = 0,
                 cpus_per_engine: float = 1.0, timeout_s: float = 600.0,
                 ray_address: str | None = None, worker_cls: type = EngineWorker,
                 gpus_per_engine: float = 0.0, bucket_bytes: int = DEFAULT_BUCKET_BYTES):
        """`gpus_per_engine`: GPUs each engine actor asks Ray for (its tensor-parallel size
        on a GPU cluster, 0 on CPU). `bucket_bytes`: the weight broadcast's bucket size."""
        import ray

        if num_engines < 1:
            raise ValueError(f"an engine group needs at least one engine, not {num_engines}")
        ensure_ray(ray_address, math.ceil(num_engines * cpus_per_engine))
        actor_cls = ray.remote(worker_cls).options(
            num_cpus=cpus_per_engine, num_gpus=gpus_per_engine,
            max_concurrency=_ACTOR_CONCURRENCY, max_restarts=0,
            runtime_env=thread_env(num_threads))

        def start(n: int) -> list:
            return [actor_cls.remote(engine_name, model_dir, cfg, eos_token_ids, pad_token_id,
                                     num_threads) for _ in range(n)]

        self._attach(start(num_engines), timeout_s,
                     ranks_per_engine=engine_record(engine_name).receiving_ranks(cfg),
                     bucket_bytes=bucket_bytes, weight_dtype=DTYPES[cfg.dtype])
        places = self._actors.call("node", [()] * num_engines, "start", timeout_s=timeout_s)
        self._members = EngineMembership(
            [EngineActor(a, *p) for a, p in zip(self._actors.live(), places)], num_engines,
            start, _locate, {"CPU": cpus_per_engine, "GPU": gpus_per_engine}, timeout_s)

    @classmethod
    def from_actors(cls, actors: list, timeout_s: float) -> "EngineGroup":
        """A handle on engine actors another process started (the data-preparation actor
        generates through it; the owner alone syncs weights and stops them)."""
        group = cls.__new__(cls)
        group._attach(actors, timeout_s)
        return group

    def _attach(self, actors: list, timeout_s: float, ranks_per_engine: int = 1,
                bucket_bytes: int = DEFAULT_BUCKET_BYTES,
                weight_dtype: torch.dtype | None = None) -> None:
        """The state both constructors set up. `weight_dtype`: the engines' weights, in which
        floating-point weights are broadcast (`wire_layout`); None: as the sender holds them."""
        self.num_engines, self.timeout_s = len(actors), timeout_s
        # Ranks per engine in the broadcast: more than one where each tensor-parallel worker
        # receives for itself (`Engine.receiving_ranks`).
        self.ranks_per_engine, self.bucket_bytes = ranks_per_engine, bucket_bytes
        self.weight_dtype = weight_dtype
        self._transport: BroadcastTransport | None = None  # when this process is the sender
        self._endpoint: Endpoint | None = None
        self._actors = ActorGroup(actors, "engine group", "engine actor", EngineGroupError)
        self.num_shares = len(actors)  # a generation's shares, however many engines live
        self._members: EngineMembership | None = None  # only the owner restarts engines

    @property
    def actors(self) -> list:
        return self._actors.live()

    def resources(self) -> list[dict[str, str]]:
        """Each engine actor's GPUs as Ray gave them."""
        return self._actors.call("resources", [()] * self.num_engines)

    # ---- the RolloutEngine surface -------------------------------------------------------

    def generate(self, prompts: list[list[int]], params: SamplingParams) -> list[list[Completion]]:
        shares = split_evenly(list(prompts), self.num_shares)
        args: list[tuple | None] = [(share, share_params(params, k))
                                    for k, share in enumerate(shares)]
        if self._members is not None:  # shares dealt over the live engines, redone on loss
            parts = self._on_members(lambda m: m.run_shares(
                "generate", args, "generation", self._fail_engine))
        else:
            parts = self._actors.call("generate",
                                      args + [None] * (self.num_engines - len(args)))
        return [group for part in parts for group in part]

    # ---- membership (`engine_membership`) ---------------------------------------------------

    def membership_metrics(self) -> dict[str, float]:
        """`engines/live`, `engines/lost_total`, `engines/joined_total`; {} for a group that
        does not restart engines."""
        return self._members.metrics() if self._members is not None else {}

    def refresh_members(self) -> None:
        """At a weight-sync point, before the sender forms its group: drop engines on nodes
        Ray reports dead, start engines where Ray has room again, and if the membership moved
        since the broadcast group formed, forget that group (`endpoint_unset` again)."""
        if self._members is None:
            return
        self._on_members(lambda m: (m.check_alive(), m.refill()))
        self._follow_members()

    def _on_members(self, work: Callable[[EngineMembership], object]):
        """`work(membership)`, the actor group following what it changed; no engine left is
        `EngineGroupError` (the run stops, exit 4)."""
        self._actors.live()  # a group that failed refuses every call
        try:
            return work(self._members)
        except EnginesLost as e:
            self._actors.abandon({}, "engine group", f"{e}: no engine is left", grace_s=0)
            raise EngineGroupError(f"{e}: no engine is left; the engine group was stopped") \
                from None
        finally:
            self._follow_members()

    def _follow_members(self) -> None:
        if self._members is None or self._actors.failure is not None:
            return
        handles = self._members.take_change()
        if handles is None:
            return
        self._actors = ActorGroup(handles, "engine group", "engine actor", EngineGroupError)
        self.num_engines = len(handles)
        self._endpoint, self._transport = None, None  # a new broadcast group at the next sync

    def _fail_engine(self, handle: object, error: str) -> None:
        """An engine raised (not died): the whole group fails, as `ActorGroup` has it."""
        position = next((i for i, h in enumerate(self._actors.live()) if h is handle), -1)
        self._actors.fail("generate", [ActorFailure(position, False, error)])

    def update_weights(self, named_tensors: Iterable[tuple[str, torch.Tensor]],
                       version: int) -> None:
        """Broadcast weights held by this process (it joins the group as the sender). Part of
        the `RolloutEngine` protocol, so the group takes weights like any engine does;
        the trainer's learner actors broadcast from rank 0 instead (`receive_while`)."""
        named = list(named_tensors)  # views of the sender's tensors, not copies

        def send() -> None:
            if self._transport is None:  # blocks until every engine has joined
                self._transport = BroadcastTransport(*self.endpoint(), self.num_receivers,
                                                     layout_of(named), self.timeout_s,
                                                     bucket_bytes=self.bucket_bytes,
                                                     wire_dtype=self.weight_dtype)
            self._transport.push(named, version)

        self.sync_with_retries(lambda: self.receive_while(send))

    def sync_with_retries(self, sync: Callable[[], None]) -> None:
        """`sync()` (one push to every engine) after `refresh_members`, again with the engines
        left while some die in its middle (each try loses one at least: bounded)."""
        for _ in range(self.num_shares):
            self.refresh_members()
            try:
                return sync()
            except EnginesLost as e:
                # The loss itself was warned of, naming the node: this is the follow-up.
                log.info("%s; pushing again to the %d left", e, self.num_engines)
        self.refresh_members()
        sync()

    def close(self) -> None:
        # No goodbye broadcast (`BroadcastTransport.close`): the engines only listen inside
        # `receive_weights`, so it would wait out the timeout; they are stopped instead.
        self._transport = None
        self._actors.close("close", timeout_s=30)

    # ---- weight sync from any sender -----------------------------------------------------

    @property
    def num_receivers(self) -> int:
        """Ranks that receive a weight broadcast: every engine's workers."""
        return self.num_engines * self.ranks_per_engine

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
        handles = self._actors.live()  # positions in `refs` are positions here
        refs = self._actors.submit("receive_weights", [
            (endpoint, 1 + i * self.ranks_per_engine, 1 + self.num_receivers, self.timeout_s)
            for i in range(self.num_engines)])
        try:
            send()
        except Exception as e:
            dead = (self._members.dead_among(refs, _SENDER_GRACE_S)
                    if self._members is not None else {})
            if dead:  # engines died mid-push: those left form a new group (the caller retries)
                self._members.lose([handles[i] for i in dead], "a weight sync",
                                   next(iter(dead.values())))
                if not self._members.engines:
                    self._actors.abandon({}, "weight sync", "every engine actor was lost",
                                         grace_s=0)
                    raise EngineGroupError("every engine actor was lost during a weight sync; "
                                           "the engine group was stopped") from e
                self._follow_members()
                raise EnginesLost(f"{len(dead)} engine(s) lost during a weight sync") from e
            # The engines wait for a push that will never come: stop them. If one died, its
            # error names the cause better, and is raised instead of the sender's.
            self._actors.abandon(refs, "weight sync", "weight sync failed on the sender's side",
                                 grace_s=_SENDER_GRACE_S)
            raise
        self._actors.wait(refs, "weight sync")
        if self._members is not None:
            self._members.weights_loaded()


def _locate(actors: list, timeout_s: float) -> list:
    """Each new engine actor's (node id, node IP) once it is built, or the error that kept it
    from starting within `timeout_s` (`EngineMembership.refill`)."""
    import ray

    refs = [a.node.remote() for a in actors]
    ray.wait(refs, num_returns=len(refs), timeout=timeout_s)
    places = []
    for ref in refs:
        try:
            places.append(ray.get(ref, timeout=0))
        except Exception as e:  # noqa: BLE001  a start that failed or did not finish in time
            places.append(e)
    return places
