"""One learner rank: joins the process group, loads and shards the policy, runs updates.

`LearnerWorker` is a plain class. The local launcher runs one in the driver process (one
learner) or one in each rank's process (several: `rlvr.distributed.ranks`, as under torchrun or
srun); the Ray launcher wraps it with `ray.remote(LearnerWorker)`
(`rlvr.distributed.learner_group`). Either way its methods are called on every rank in the same
order: `update`, `named_full_weights`,
`state_dict` and `load_state_dict` are collectives and would time out (not hang) if a rank
skipped one.

It is not the driver: it does not split batches (`balance`), pick ports for other ranks, or
combine results across ranks. It takes a loss as its name and parameters and binds them in a
`PolicyLoss`, the same picklable loss the trainer uses in one process.
"""

from __future__ import annotations

import dataclasses
import os
from dataclasses import dataclass
from typing import Any

import torch
from torch.distributed.checkpoint.state_dict import StateDictOptions, set_model_state_dict

from rlvr.algorithm.losses import LossParams, PolicyLoss
from rlvr.device import (bind, check_one_gpu_per_rank, keep_freed_host_memory,
                         resolve_device)
from rlvr.distributed.ray_session import actor_resources, free_endpoint
from rlvr.distributed.sharding import (ShardingMode, full_weight_layout,
                                       gather_full_state_dict, iter_full_weights, reshard,
                                       shard_policy, sharded_forward_logprobs)
from rlvr.distributed.world import DEFAULT_TIMEOUT_S, World, destroy_world, init_world
from rlvr.learner import Learner, LearnerSettings, LearnerState, UpdateResult
from rlvr.learner.learner import LossFn, MiniBatch
from rlvr.learner.lora import (LoraSettings, adapter_scales, is_lora, merge_adapter_weights,
                               merged_layout, wrap_lora)
from rlvr.learner.memory_plan import MemoryPlan, MemoryPlanError
from rlvr.learner.state_by_name import load_optimizer_state_by_name, load_policy_state_by_name
from rlvr.models import load_causal_lm
from rlvr.plugins import import_from_environment
from rlvr.rollout.weight_sync.broadcast import DEFAULT_BUCKET_BYTES, BroadcastTransport
from rlvr.types import PackedBatch


@dataclass(frozen=True)
class LearnerSpec:
    """What every rank needs to build its share of the learner (picklable: sent to actors)."""

    model_dir: str  # a local directory every rank can read (resolve built-ins on the driver)
    settings: LearnerSettings  # its bf16_autocast is the run's resolved bf16 compute
    # "cuda" | "cpu" as the driver resolved `model.device` for the cluster ("auto" lets each
    # rank decide from what it sees); each rank picks its own GPU (`rlvr.device`).
    device: str = "auto"
    dtype: str = "float32"  # "float32" | "bfloat16", as `rlvr.models.load_causal_lm`
    attn_implementation: str = "sdpa"  # `model.attn_implementation`
    sharding: ShardingMode = "fsdp"  # "none" only for a single rank
    cpu_offload: bool = False
    with_reference: bool = False  # a frozen reference policy (needed when beta > 0)
    timeout_s: float = DEFAULT_TIMEOUT_S  # rendezvous and every collective
    # torch threads per rank (several busy processes share the cores); 0 leaves the process's
    # setting alone, which the local backend wants (it runs in the trainer's process)
    num_threads: int = 1
    # LoRA adapters (`model.lora`), put in before sharding; the reference is then the policy
    # with its adapters off, and engines get merged weights. None: every weight trains.
    lora: LoraSettings | None = None
    keep_host_memory: bool = False  # `rlvr.device.keep_freed_host_memory` in each rank


class LearnerWorker:
    """Rank `rank` of `world_size` learners. Construct (cheap), then `setup` on every rank."""

    def __init__(self, spec: LearnerSpec, rank: int, world_size: int):
        import_from_environment()  # a Ray actor: the run's plugins name its loss
        self.spec, self.rank, self.world_size = spec, rank, world_size
        self.world: World | None = None
        self.learner: Learner | None = None
        self._engines: BroadcastTransport | None = None  # rank 0 only, from the first push
        self._engines_at: tuple[str, int] | None = None  # the endpoint its group formed at
        self.device = None  # resolved in setup, on the rank's own process

    def rendezvous_address(self) -> str:
        """An init_method on this rank's host, for rank 0 to serve (only rank 0 is asked).

        The port is free when chosen; another process could take it before rank 0 binds it, in
        which case setup fails loudly and the caller may retry."""
        host, port = free_endpoint()
        return f"tcp://{host}:{port}"

    def node_id(self) -> str:
        """The Ray node this rank runs on ("local" without Ray): where placement put it."""
        import ray

        return ray.get_runtime_context().get_node_id() if ray.is_initialized() else "local"

    def resources(self) -> dict[str, str]:
        """The GPUs Ray gave this rank and the device it computes on (after setup)."""
        return {**actor_resources(), "device": str(self.device.torch) if self.device else ""}

    def setup(self, init_method: str | None) -> None:
        """Join the group (blocks until every rank has joined, or the timeout), load, shard."""
        spec = self.spec
        if spec.num_threads > 0:
            torch.set_num_threads(spec.num_threads)
        # LOCAL_RANK: this rank's index on its node under torchrun / srun; a Ray actor sees
        # only the GPU it was given, whatever its rank.
        self.device = resolve_device(spec.device, int(os.environ.get("LOCAL_RANK", "0")))
        bind(self.device)
        if spec.keep_host_memory:
            keep_freed_host_memory()
        if self.world is None:  # ranks a launcher started have joined before (`ranks`)
            self.world = World.single() if self.world_size == 1 else init_world(
                self.rank, self.world_size, init_method, self.device.backend,
                timeout_s=spec.timeout_s)
        if self.world.is_distributed and self.device.type == "cuda":
            # before NCCL's first collective; bounded as every collective of the ranks
            check_one_gpu_per_rank(self.device, self.world_size, self.world.timeout_s)
        # The driver ran the load-time model checks on this directory and dtype (rlvr.run.build).
        policy = load_causal_lm(spec.model_dir, spec.dtype, spec.attn_implementation)
        if spec.lora is not None:  # every rank alike (seeded init), before sharding
            policy = wrap_lora(policy, spec.lora)
        # Copied before sharding: FSDP2 rewrites the module in place, and each copy needs its
        # own sharded parameters. A LoRA policy's reference is its base: no copy.
        reference = (Learner.frozen_copy(policy) if spec.with_reference and spec.lora is None
                     else None)
        sharding = "none" if self.world_size == 1 else spec.sharding
        settings = spec.settings
        if sharding == "none":  # one rank: the weights move, autocast gives bf16 matmuls
            policy.to(self.device.torch)
            if reference is not None:
                reference.to(self.device.torch)
        else:  # FSDP2 moves the shards and casts them (mixed precision), so no autocast
            bf16 = settings.bf16_autocast
            shard_policy(policy, sharding, spec.cpu_offload, self.world, self.device, bf16)
            if reference is not None:
                shard_policy(reference, sharding, spec.cpu_offload, self.world, self.device,
                             bf16)
            settings = dataclasses.replace(settings, bf16_autocast=False)
        # The optimizer is built inside Learner, after sharding, so it holds the DTensors.
        self.learner = Learner(policy, reference, settings, forward_fn=sharded_forward_logprobs,
                               device=self.device.torch,
                               reference_is_base=spec.with_reference and spec.lora is not None)

    def loss_fn(self, loss_name: str, loss_params: LossParams) -> LossFn:
        """The loss the learner runs (a seam: tests wrap it to inject faults)."""
        return PolicyLoss(loss_name, loss_params)

    def update(self, batch_part: PackedBatch, loss_name: str, loss_params: LossParams,
               num_micro_batches: int, num_epochs: int, temperature: float) -> UpdateResult:
        """This rank's share of one update. Every rank must pass the same `num_micro_batches`
        and have at least that many rows (`balance.split_batch_for_ranks` ensures both).
        `loss_params.denominator` is the GLOBAL count, so the ranks' gradients sum to the
        one-process gradient."""
        if batch_part.num_rows < num_micro_batches:
            raise ValueError(f"rank {self.rank}: {batch_part.num_rows} rows for "
                             f"{num_micro_batches} micro-batches; the ranks would fall out of "
                             "step (split batches with rlvr.distributed.balance)")
        return self._learner().update(batch_part, self.loss_fn(loss_name, loss_params),
                                      num_micro_batches, num_epochs, temperature)

    def update_mini_batches(self, parts: list[MiniBatch], num_epochs: int,
                            temperature: float) -> UpdateResult:
        """This rank's share of each mini-batch (`LearnerGroup.update_mini_batches` splits them
        so that every rank has the same count of each), one optimizer step per mini-batch. Each
        loss is a `PolicyLoss` with its mini-batch's GLOBAL count as denominator."""
        for i, mb in enumerate(parts):
            if mb.batch.num_rows < mb.num_micro_batches:
                raise ValueError(f"rank {self.rank}: {mb.batch.num_rows} rows for "
                                 f"{mb.num_micro_batches} micro-batches in mini-batch {i}; the "
                                 "ranks would fall out of step (split batches with "
                                 "rlvr.distributed.balance)")
        bound = [MiniBatch(mb.batch, self.loss_fn(mb.loss.name, mb.loss.params),
                           mb.num_micro_batches) for mb in parts]
        return self._learner().update_mini_batches(bound, num_epochs, temperature)

    def plan_memory(self) -> MemoryPlan | MemoryPlanError | None:
        """This rank's part of the group's memory plan (`Learner.plan_memory`), a collective:
        every rank probes its own GPU and all take the fewest rows any fits, so all decide and
        cut alike; None where nothing is planned (CPU, or the config fixed both choices). No
        row fitting is returned, not raised: every rank finds it alike, and the driver stops
        the run with it as bad input (exit 2) rather than as a failed rank."""
        learner = self._learner()
        if not learner.memory_plan_pending:
            return None
        try:
            return learner.plan_memory(agree=self._fewest_rows)
        except MemoryPlanError as error:
            return error

    def _fewest_rows(self, rows: int) -> int:
        if self.world_size == 1:
            return rows
        fewest = torch.tensor([rows], device=self.device.torch)  # NCCL reduces device tensors
        torch.distributed.all_reduce(fewest, op=torch.distributed.ReduceOp.MIN)
        return int(fewest.item())

    def skip_update(self, num_epochs: int) -> None:
        """A step without a batch: every rank moves its schedule alike (`Learner.skip_update`)."""
        self._learner().skip_update(num_epochs)

    def named_full_weights(self) -> dict[str, torch.Tensor] | None:
        """The policy's full weights on rank 0 (None elsewhere), by the policy's own names (a
        LoRA policy's: PEFT's, adapters unmerged). A collective."""
        return gather_full_state_dict(self._learner().policy, self.world)

    def weight_sync_endpoint(self) -> tuple[str, int]:
        """Where this rank (0) will serve the engines' broadcast group."""
        return free_endpoint()

    def push_weights(self, version: int, endpoint: tuple[str, int], num_engines: int,
                     bucket_bytes: int = DEFAULT_BUCKET_BYTES,
                     wire_dtype: torch.dtype | None = None) -> str | None:
        """Gather the full weights (a collective) and broadcast them from rank 0 to the
        engines in buckets of at most `bucket_bytes`, over this rank's backend (NCCL from a
        GPU, gloo from a CPU); the first push also forms the group at `endpoint` (from
        `weight_sync_endpoint`), blocking until every engine has joined. `num_engines` counts
        receiving ranks. Floating-point weights travel in `wire_dtype`, the engines' weight
        dtype (`wire_layout`; None: as the learner holds them). The bucket size and the wire
        dtype are fixed by the first push. A new `endpoint` forms a new group (the engines
        changed: `rlvr.distributed.engine_membership`).

        A push that fails on the engines' side (one died mid-broadcast) is returned as rank 0's
        "Type: message", not raised: this rank still takes part in every gather (the other
        ranks wait on it), and the learners stay up while the engines left form a new group.
        None when the push went through, and on every other rank."""
        policy = self._learner().policy
        weights = iter_full_weights(policy)  # gathered one tensor at a time, on every rank
        if self.rank != 0:
            for _ in weights:  # take part in each tensor's all-gather, in rank 0's order
                pass
            return
        layout = full_weight_layout(policy)
        if is_lora(policy):  # engines load merged weights under the base model's names
            scales = adapter_scales(policy)
            weights, layout = merge_adapter_weights(weights, scales), merged_layout(layout, scales)
        try:
            if self._engines is None or self._engines_at != tuple(endpoint):
                self._engines = None  # a group that lost an engine cannot be reused
                host, port = endpoint
                self._engines = BroadcastTransport(
                    host, port, num_engines, layout, self.spec.timeout_s,
                    bucket_bytes=bucket_bytes, backend=self.device.backend,
                    device=self.device.torch, wire_dtype=wire_dtype)
                self._engines_at = tuple(endpoint)
            self._engines.push(weights, version)
        except Exception as e:  # noqa: BLE001  reported to the driver, which decides
            for _ in weights:  # the other ranks' gathers go on: take part to the end
                pass
            self._engines, self._engines_at = None, None
            return f"{type(e).__name__}: {e}"
        return None

    def update_reference(self, alpha: float) -> None:
        """Polyak step on this rank's shards: policy and reference are sharded alike."""
        learner = self._learner()
        reshard(learner.policy)
        if learner.reference is not None:
            reshard(learner.reference)
        learner.update_reference(alpha)

    def state_dict(self) -> LearnerState | None:
        """`Learner.training_state` (keyed by parameter name, the format of one process) on
        rank 0, None elsewhere. A collective."""
        state = self._learner().training_state()
        return state if self.rank == 0 else None

    def load_state_dict(self, state: LearnerState | None) -> None:
        """Restore a `LearnerState` from any learner: rank 0 passes it, the others pass None
        (rank 0 broadcasts). A collective."""
        learner = self._learner()
        opts = StateDictOptions(full_state_dict=True, broadcast_from_rank0=self.world_size > 1)
        mine = state if self.rank == 0 else None
        # Every rank steps its own scheduler, and must know whether the optimizer had stepped:
        # a few numbers, sent to all ranks.
        scheduler, fresh = self._broadcast_object(
            (mine["scheduler"], not mine["optimizer"]["state"]) if mine else None)
        # The optimizer before the weights, as in `Learner.load_training_state`.
        load_optimizer_state_by_name(learner.policy, learner.optimizer,
                                     mine["optimizer"] if mine else {}, opts, fresh)
        load_policy_state_by_name(learner.policy, mine["policy"] if mine else {}, opts)
        if learner.reference is not None:
            set_model_state_dict(learner.reference, mine["reference"] if mine else {},
                                 options=opts)
        learner.scheduler.load_state_dict(scheduler)

    def shutdown(self) -> None:
        # No goodbye broadcast to the engines: they listen only while the driver asks them to
        # receive, so it would wait out the timeout; the driver stops them itself.
        self._engines = None
        if self.world is not None:
            destroy_world(self.world)
        self.learner = None

    def _learner(self) -> Learner:
        if self.learner is None:
            raise RuntimeError(f"learner rank {self.rank} is not set up (call setup first)")
        return self.learner

    def _broadcast_object(self, obj: Any) -> Any:
        if self.world_size == 1:
            return obj
        box = [obj]
        torch.distributed.broadcast_object_list(box, src=0)
        return box[0]

    def save_sharded_state(self, directory: str | os.PathLike, extra: dict[str, Any]) -> None:
        """`Learner.save_sharded_state`: every rank writes its own shards into `directory`, on
        a filesystem every rank reaches; rank 0 writes `extra` and publishes. A collective."""
        self._resharded().save_sharded_state(directory, extra)

    def load_sharded_state(self, directory: str | os.PathLike) -> dict[str, Any]:
        """`Learner.load_sharded_state`: saved by any number of ranks, each rank reads the
        slices its shards need; returns the saved `extra` (on every rank). A collective."""
        return self._resharded().load_sharded_state(directory)

    def _resharded(self) -> Learner:
        """The learner with its models as this rank's shards, what DCP reads and writes."""
        learner = self._learner()
        reshard(learner.policy)
        if learner.reference is not None:
            reshard(learner.reference)
        return learner

