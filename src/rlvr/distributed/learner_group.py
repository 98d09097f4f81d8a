"""The driver's handle on N learner ranks, with the surface the trainer uses from `Learner`.

`update` splits the batch across ranks (`balance`), runs every rank's share, and combines the
per-rank `UpdateResult`s into one that reads like a single process's. Three backends:
- "local": one `LearnerWorker` in this process, no Ray (the embedded default, one learner).
- "ray": one Ray actor per rank, placed by a placement group, joined in one gloo group.
- "ranks": processes a launcher started (the local launcher, torchrun, srun), joined by
  torch.distributed; this process is rank 0 and drives the others (`rlvr.distributed.ranks`).

Failures are loud and bounded in time (`actor_calls.ActorGroup`, with the ranks as collective
peers). A rank that raises, or whose process dies, fails the call: the driver waits briefly for
the other ranks' errors (a dead peer makes them raise within the collective timeout), kills
every actor and raises `LearnerGroupError` naming each rank and its traceback. After that the
group refuses further calls; the run should stop.

Not here: Ray for engines or data, the config (the trainer builds a `LearnerSpec`), the loss
denominator (the caller's global count, passed in `LossParams`).
"""

from __future__ import annotations

import dataclasses
import logging
import math
import os
import time
from typing import Any, Iterator

import torch

from rlvr.algorithm.losses import LossParams, PolicyLoss
from rlvr.distributed.actor_calls import ActorGroup
from rlvr.distributed.balance import split_batch_for_ranks
from rlvr.distributed.learner_worker import LearnerSpec, LearnerWorker
from rlvr.distributed.ranks import RankEnv, RankFailure, RankGroup
from rlvr.distributed.ray_session import ensure_ray, thread_env
from rlvr.learner import UpdateResult
from rlvr.learner.learner import MiniBatch, accumulate_sums
from rlvr.types import PackedBatch

log = logging.getLogger(__name__)

BACKENDS = ("local", "ray", "ranks")
# A failed rank whose actor Ray cannot reach: its node may be lost, which Ray declares after its
# health checks fail (seconds), so its verdict is waited for that long. (An actor that died on a
# node Ray knows dead says so already; one whose process alone died leaves its node alive.)
_ACTOR_UNREACHABLE = "ActorUnavailableError"
_NODE_VERDICT_S = 30.0


class LearnerGroupError(RuntimeError):
    """A learner rank failed (raised, died or timed out); the group is unusable."""


class WeightPushFailed(LearnerGroupError):
    """Rank 0 could not push the weights to the engines (`LearnerWorker.push_weights`); the
    learners are intact. The engine group decides: a new group with the engines left, or a
    stop when none died (a learner fault then, as before)."""


def combine_results(results: list[UpdateResult], seconds: float) -> UpdateResult:
    """One step's result from every rank's: sums add, maxima take the max. Grad norm, learning
    rate and skipped steps are global (the norm is all-reduced), so rank 0's are everyone's."""
    sums: dict[str, float] = {}
    for r in results:
        accumulate_sums(sums, r.loss_sums)
    memory: dict[str, float] = {}
    for r in results:  # the fullest device is the one that runs out
        for key, value in r.memory.items():
            memory[key] = max(memory.get(key, value), value)
    first = results[0]
    return UpdateResult(
        loss_sums=sums,
        num_response_tokens=sum(r.num_response_tokens for r in results),
        num_tokens=sum(r.num_tokens for r in results),
        num_sequences=sum(r.num_sequences for r in results),
        entropy_sum=sum(r.entropy_sum for r in results),
        engine_diff_sum=sum(r.engine_diff_sum for r in results),
        engine_diff_max=max(r.engine_diff_max for r in results),
        engine_kl_sum=sum(r.engine_kl_sum for r in results),
        engine_ratio_T=_joined([r.engine_ratio_T for r in results]),
        grad_norm=first.grad_norm, learning_rate=first.learning_rate,
        skipped_steps=first.skipped_steps, seconds=seconds, memory=memory)


def _joined(parts: list[torch.Tensor | None]) -> torch.Tensor | None:
    """Every rank's ratio sample in one [T] tensor (each rank's is bounded already)."""
    kept = [p for p in parts if p is not None]
    return torch.cat(kept) if kept else None


class LearnerGroup:
    """`num_learners` ranks of one policy; call `close()` (or use `with`) when done."""

    def __init__(self, spec: LearnerSpec, num_learners: int = 1, backend: str = "local",
                 ray_address: str | None = None, cpus_per_learner: float = 1.0,
                 learners_per_node: list[int] | None = None, worker_cls: type = LearnerWorker,
                 gpus_per_learner: float = 0.0, rank_env: "RankEnv | None" = None):
        """`ray_address`: an existing cluster ("auto", "ray://host:10001", "host:6379"); None
        uses the Ray session already initialised in this process, else starts a small local
        one. `learners_per_node`: how many ranks each node runs (default: all on one node);
        ranks are numbered node by node. `worker_cls`: a LearnerWorker subclass (tests inject
        faults). `gpus_per_learner`: GPUs each rank's actor asks Ray for (1 on a GPU
        cluster; Ray then shows each actor only its own through CUDA_VISIBLE_DEVICES).
        `rank_env`: the "ranks" backend's place in the ranks (this process is rank 0; default:
        from the environment torchrun defines)."""
        if backend not in BACKENDS:
            raise ValueError(f"backend '{backend}' is not one of {BACKENDS}")
        if backend == "local" and num_learners != 1:
            raise ValueError(f"the local backend runs one learner, not {num_learners}; "
                             "use backend='ranks' or 'ray'")
        self.spec, self.num_learners, self.backend = spec, num_learners, backend
        self.learners_per_node = list(learners_per_node or [num_learners])
        if sum(self.learners_per_node) != num_learners:
            raise ValueError(f"learners_per_node={self.learners_per_node} does not add up to "
                             f"{num_learners} learners")
        self._placement_group = None
        self.rank_nodes: list[str] = ["local"] * num_learners  # the Ray node of each rank
        self.rank_resources: list[dict[str, str]] = []  # each Ray rank's GPUs and device
        self.gpus_per_learner = gpus_per_learner
        self._memory_planned = False  # `_plan_memory_once`
        self._local: LearnerWorker | None = None  # the local backend's one rank
        self._actors: ActorGroup | None = None  # the Ray backend's ranks
        self._ranks: RankGroup | None = None  # the ranks backend's
        if backend == "local":
            self._local = worker_cls(spec, 0, 1)
            self._local.setup(None)
        elif backend == "ranks":
            self._start_ranks(rank_env, worker_cls)
        else:
            self._start_ray_workers(ray_address, cpus_per_learner, worker_cls)

    # ---- the Learner surface -------------------------------------------------------------

    def update(self, batch: PackedBatch, loss_name: str, loss_params: LossParams,
               num_micro_batches: int, num_epochs: int, temperature: float) -> UpdateResult:
        """One step over `batch` on all ranks. `num_micro_batches` cuts the whole batch as on
        one process (each rank runs ceil(M / N)); `loss_params.denominator` must be the whole
        batch's count."""
        return self.update_mini_batches(
            [MiniBatch(batch, PolicyLoss(loss_name, loss_params), num_micro_batches)],
            num_epochs, temperature)

    def update_mini_batches(self, mini_batches: list[MiniBatch], num_epochs: int,
                            temperature: float) -> UpdateResult:
        """One optimizer step per mini-batch on all ranks (`Learner.update_mini_batches`). Each
        mini-batch is split across the ranks on its own (`balance`), so every rank takes part in
        every step; its `num_micro_batches` cuts it as on one process. Each loss must be a
        `PolicyLoss` whose denominator counts its whole mini-batch."""
        start = time.perf_counter()
        self._plan_memory_once()
        budget = self.spec.settings.max_tokens_per_micro_batch
        per_rank: list[list[MiniBatch]] = [[] for _ in range(self.num_learners)]
        for mb in mini_batches:
            split = split_batch_for_ranks(mb.batch, self.num_learners, mb.num_micro_batches,
                                          budget)
            for rank, part in enumerate(split.parts):
                per_rank[rank].append(MiniBatch(part, mb.loss, split.num_micro_batches))
        results = self._call("update_mini_batches",
                             [(parts, num_epochs, temperature) for parts in per_rank], "update")
        return combine_results(results, seconds=time.perf_counter() - start)

    def _plan_memory_once(self) -> None:
        """Before the first update: the ranks' memory plan (`LearnerWorker.plan_memory`), whose
        budget then cuts the batches here as on every rank."""
        if self._memory_planned:
            return
        self._memory_planned = True
        plan = self._call("plan_memory", [()] * self.num_learners, "memory plan")[0]
        if isinstance(plan, Exception):  # no row fits (`LearnerWorker.plan_memory`)
            raise plan
        if plan is not None:
            self.spec = dataclasses.replace(self.spec, settings=dataclasses.replace(
                self.spec.settings, gradient_checkpointing=plan.gradient_checkpointing,
                max_tokens_per_micro_batch=plan.max_tokens_per_micro_batch))
            log.info("learner memory plan (rank 0's figures, every rank's fewest rows): %s",
                     plan.describe())

    def skip_update(self, num_epochs: int) -> None:
        self._call("skip_update", [(num_epochs,)] * self.num_learners)

    def named_weights(self) -> Iterator[tuple[str, torch.Tensor]]:
        """The policy's full weights, gathered on rank 0 and brought to the driver."""
        full = self._call("named_full_weights", [()] * self.num_learners)[0]
        return iter(full.items())

    def weight_sync_endpoint(self) -> tuple[str, int]:
        """Where rank 0 will serve the engines' weight broadcast (a free port on its node)."""
        return self._call("weight_sync_endpoint", [()] + [None] * (self.num_learners - 1))[0]

    def push_weights(self, version: int, endpoint: tuple[str, int], num_receivers: int,
                     bucket_bytes: int, wire_dtype: torch.dtype | None = None) -> None:
        """Every rank gathers; rank 0 broadcasts to the `num_receivers` engine ranks at
        `endpoint`, which must be receiving meanwhile (`EngineGroup.receive_while`), its
        floating-point weights in `wire_dtype` (the engines'; None: the learner's)."""
        error = self._call("push_weights", [(version, endpoint, num_receivers, bucket_bytes,
                                             wire_dtype)] * self.num_learners)[0]
        if error is not None:
            raise WeightPushFailed(f"learner rank 0 could not push the weights to the engines "
                                   f"at {endpoint[0]}:{endpoint[1]}: {error}")

    def update_reference(self, alpha: float) -> None:
        self._call("update_reference", [(alpha,)] * self.num_learners)

    def state_dict(self) -> dict[str, Any]:
        """Full policy, reference, optimizer and scheduler state (optimizer state keyed by
        parameter name), for `load_state_dict` on a group of any size. As with
        `nn.Module.state_dict`, the local backend's tensors are the live ones: save them
        before the next update (Ray's arrive as copies)."""
        return self._call("state_dict", [()] * self.num_learners)[0]

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self._call("load_state_dict", [(state,)] + [(None,)] * (self.num_learners - 1))

    def save_sharded_state(self, directory: str | os.PathLike, extra: dict[str, Any]) -> None:
        """Every rank writes its own shards into `directory` (`LearnerWorker.save_sharded_state`),
        which must be on a filesystem every rank's node reaches; nothing passes through here."""
        self._call("save_sharded_state", [(directory, extra)] * self.num_learners)

    def load_sharded_state(self, directory: str | os.PathLike) -> dict[str, Any]:
        """Every rank reads its part of a sharded state saved by any number of ranks; returns
        the saved `extra`."""
        return self._call("load_sharded_state", [(directory,)] * self.num_learners)[0]

    def close(self) -> None:
        """Stop every rank. Safe to call twice and after a failure. A Ray session stays up
        (engines may share it): `ray.shutdown()` is the caller's."""
        if self._local is not None:
            self._local.shutdown()
            self._local = None
        if self._actors is not None:
            self._actors.kill()
        if self._ranks is not None:
            self._ranks.close()
            self._ranks = None
        self._remove_placement_group()  # in case placement failed before any actor started

    def __enter__(self) -> "LearnerGroup":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # ---- running calls on every rank -----------------------------------------------------

    def _call(self, method: str, args_per_rank: list[tuple | None],
              what: str | None = None) -> list[Any]:
        """`method` on every rank with its arguments; None skips a rank (not for collectives).
        `what` names the call in errors (default: `method`)."""
        if self._actors is not None:
            try:
                return self._actors.call(method, args_per_rank, what)
            except LearnerGroupError as e:  # a lost node is the likeliest cause: name it first
                lost = self._ranks_on_dead_nodes(str(e))
                if not lost:
                    raise
                raise LearnerGroupError(f"{lost}\n{e}") from e.__cause__
        if self._ranks is not None:
            try:
                return self._ranks.call(method, args_per_rank)
            except RankFailure as e:
                raise LearnerGroupError(str(e)) from e
        if self._local is None:
            raise LearnerGroupError("the learner group is closed")
        return [getattr(self._local, method)(*args) for args in args_per_rank
                if args is not None]

    # ---- ranks a launcher started -------------------------------------------------------

    def _start_ranks(self, env: "RankEnv | None", worker_cls: type) -> None:
        """Join the ranks as rank 0 (blocks until all have joined, or the timeout) and set
        every rank up. The followers must run the same config (`rlvr train` on every rank)."""
        env = env or RankEnv.from_environ()
        if env is None or env.world_size != self.num_learners:
            have = "no torch.distributed environment" if env is None else \
                f"WORLD_SIZE={env.world_size}"
            raise LearnerGroupError(
                f"{self.num_learners} learner ranks need their processes started by a launcher "
                f"(`rlvr train` with distributed.launcher=local or slurm, torchrun "
                f"--nproc-per-node, or srun), but this process has {have}")
        try:
            self._ranks = RankGroup(self.spec, env, worker_cls)
        except Exception as e:  # a rank that never joined, a port taken: the same error type
            raise LearnerGroupError(f"the {self.num_learners} learner ranks could not join at "
                                    f"{env.master_addr}:{env.master_port}: {e}") from e
        self.rank_nodes = list(self._ranks.hosts)
        self._call("setup", [(None,)] * self.num_learners)
        log.info("learner ranks on hosts: %s", ", ".join(
            f"{rank}:{host}" for rank, host in enumerate(self.rank_nodes)))

    # ---- Ray plumbing --------------------------------------------------------------------

    def _start_ray_workers(self, address: str | None, cpus: float, worker_cls: type) -> None:
        """One placement bundle per node holding that node's learners: STRICT_SPREAD puts the
        bundles on different nodes, so `learners_per_node` means what it says."""
        import ray
        from ray.util.placement_group import placement_group
        from ray.util.scheduling_strategies import PlacementGroupSchedulingStrategy

        per_node = [n for n in self.learners_per_node if n > 0]
        ensure_ray(address, math.ceil(self.num_learners * cpus))
        gpus = self.gpus_per_learner
        bundles = [{"CPU": n * cpus, **({"GPU": n * gpus} if gpus else {})} for n in per_node]
        pg = placement_group(bundles, strategy="PACK" if len(per_node) == 1 else "STRICT_SPREAD")
        self._placement_group = pg
        try:
            ray.get(pg.ready(), timeout=self.spec.timeout_s)
        except ray.exceptions.GetTimeoutError:
            self._remove_placement_group()
            raise LearnerGroupError(
                f"Ray could not place learners {per_node} per node ({cpus} CPU, {gpus} GPU "
                f"each) within "
                f"{self.spec.timeout_s:.0f} s; cluster resources: {ray.cluster_resources()}, "
                f"nodes alive: {sum(1 for n in ray.nodes() if n.get('Alive'))}")
        bundle_of_rank = [node for node, n in enumerate(per_node) for _ in range(n)]
        actor_cls = ray.remote(worker_cls)
        workers = [
            actor_cls.options(
                num_cpus=cpus, num_gpus=gpus, max_restarts=0, name=None,
                runtime_env=thread_env(self.spec.num_threads),
                scheduling_strategy=PlacementGroupSchedulingStrategy(
                    pg, placement_group_bundle_index=bundle_of_rank[rank]),
            ).remote(self.spec, rank, self.num_learners)
            for rank in range(self.num_learners)]
        # Once one rank has finished a call, the others get one collective timeout more.
        self._actors = ActorGroup(workers, "learner group", "learner rank", LearnerGroupError,
                                  peers_timeout_s=self.spec.timeout_s,
                                  on_kill=self._remove_placement_group)
        address = self._actors.call("rendezvous_address",
                                    [()] + [None] * (self.num_learners - 1), "start")[0]
        self._call("setup", [(address,)] * self.num_learners)
        self.rank_nodes = self._call("node_id", [()] * self.num_learners)
        self.rank_resources = self._call("resources", [()] * self.num_learners)
        log.info("learner ranks on Ray nodes: %s", ", ".join(
            f"{rank}:{node[:8]} ({res['device']}, GPUs {res['gpu_ids'] or 'none'})"
            for rank, (node, res) in enumerate(zip(self.rank_nodes, self.rank_resources))))

    def _ranks_on_dead_nodes(self, error: str) -> str:
        """"learner rank 1 ran on node ab12cd34ef56 (10.0.0.7), which Ray reports dead" for
        each rank whose node is gone; "" when none is. A rank Ray could not reach may be on a
        node Ray has not yet declared dead: its verdict is waited for, `_NODE_VERDICT_S` (and
        the collective timeout) at most."""
        import ray

        wait_s = min(_NODE_VERDICT_S, self.spec.timeout_s)  # never past a collective's bound
        deadline = time.monotonic() + (wait_s if _ACTOR_UNREACHABLE in error else 0.0)
        while True:
            try:
                nodes = {n["NodeID"]: n for n in ray.nodes()}
            except Exception:  # noqa: BLE001  no GCS to ask: say nothing more
                return ""
            lost = [(rank, node, nodes[node].get("NodeManagerAddress", "?"))
                    for rank, node in enumerate(self.rank_nodes)
                    if node in nodes and not nodes[node].get("Alive")]
            if lost or time.monotonic() > deadline:
                break
            time.sleep(0.5)
        return "; ".join(f"learner rank {rank} ran on node {node[:12]} ({ip}), which Ray "
                         "reports dead: its node was lost" for rank, node, ip in lost)

    def _remove_placement_group(self) -> None:
        if self._placement_group is not None:
            import ray  # only Ray's backend holds one: the others close where Ray is absent

            ray.util.remove_placement_group(self._placement_group)
            self._placement_group = None

