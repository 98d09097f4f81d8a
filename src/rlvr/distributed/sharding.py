"""Wrap a policy for data-parallel training (FSDP2), and gather its full weights back.

Three modes, chosen by a string at the config level:
- "none": the plain module, for one process.
- "fsdp": FSDP2 `fully_shard` on every decoder layer, then on the root (ZeRO-3: parameters,
  gradients and optimizer state sharded; each layer's weights all-gathered just before use).
- "ddp": FSDP2 on a 2-D (replicate, shard) mesh whose shard dimension has size 1 (HSDP with
  nothing to shard), so every rank holds the whole model and gradients are all-reduced: DDP
  semantics, with the same DTensor parameters, gradient-reduction settings, grad clipping and
  state-dict path as "fsdp". It is chosen over `torch.distributed._composable.replicate`
  because that DDP wrapper averages gradients with no public knob to sum them, and over the
  FSDP-based `replicate_with_fsdp` because that module is private; `fully_shard` with a mesh is
  public API and works over gloo on CPU (tested).

Either way gradients are SUMMED across ranks, not averaged (FSDP2's default): the loss on each
rank is already its token sum divided by the global count, so the sum over ranks is the whole
batch's gradient. Both knobs below are needed on gloo: a divide factor of 1 alone would ask for
a PREMUL_SUM reduction, which gloo does not implement; forcing plain SUM collectives makes FSDP
apply the (unit) factor itself.

FSDP2 all-gathers a unit's parameters in hooks around its `forward`. `forward_logprobs` never
calls the root's `forward`: it runs the decoder and then the head on response positions only, so
the root unit's parameters (embeddings, final norm, the tied head) would stay sharded and the
embedding raises "mixed torch.Tensor and DTensor". `shard_policy` therefore registers a
`forward_logprobs` method on the root as an FSDP forward method, and a sharded model's learner is
given `sharded_forward_logprobs`, which calls it.

Both meshes carry cross-rank traffic only on torch's default group (a 1-D mesh over the world
reuses it; the (N, 1) mesh's replicate dimension spans the world, and its size-1 shard groups
never wait on a peer), so the `init_process_group` timeout bounds every FSDP collective.

This module knows nothing about losses or batches; the learner only sees a module whose
parameters may be DTensors.
"""

from __future__ import annotations

import types
from typing import Iterator, Literal

import torch
from torch.distributed.checkpoint.state_dict import StateDictOptions, get_model_state_dict
from torch.distributed.device_mesh import init_device_mesh
from torch.distributed.tensor import DTensor
from torch.distributed.fsdp import (CPUOffloadPolicy, FSDPModule, MixedPrecisionPolicy,
                                    OffloadPolicy, fully_shard, register_fsdp_forward_method)

from rlvr.device import Device
from rlvr.distributed.world import World
from rlvr.learner.forward import forward_logprobs
from rlvr.models import decoder_layers
from rlvr.types import PackedBatch

ShardingMode = Literal["none", "ddp", "fsdp"]
SHARDING_MODES: tuple[str, ...] = ("none", "ddp", "fsdp")


def shard_policy(model: torch.nn.Module, mode: ShardingMode, cpu_offload: bool,
                 world: World, device: Device, bf16_compute: bool = False) -> torch.nn.Module:
    """Shard `model` in place (and return it) over the ranks' `device`s. Build the optimizer
    AFTER this: FSDP2 replaces parameters with DTensors (and moves them to the device, or
    keeps them on the host with `cpu_offload`). All ranks must start from the same weights
    (load the same checkpoint, or the same seed), since "ddp" and "fsdp" keep each rank's own
    slice of them. `bf16_compute`: FSDP2 mixed precision, each unit's gathered parameters cast
    to bf16 for forward and backward while the sharded master weights, the optimizer state
    and the gradient reduction stay in the weights' dtype (fp32 reduction: summing bf16
    gradients across many ranks loses precision)."""
    if mode not in SHARDING_MODES:
        raise ValueError(f"sharding '{mode}' is not one of {SHARDING_MODES}")
    if mode == "none":
        if world.is_distributed:
            raise ValueError("sharding='none' runs one process; use 'ddp' or 'fsdp' for "
                             f"{world.world_size} ranks")
        return model
    if mode == "fsdp":
        mesh = init_device_mesh(device.type, (world.world_size,), mesh_dim_names=("shard",))
    else:  # ddp: replicate over every rank, shard over a group of one
        mesh = init_device_mesh(device.type, (world.world_size, 1),
                                mesh_dim_names=("replicate", "shard"))
    # Pinned host memory needs an accelerator runtime; without one pinning raises.
    offload = CPUOffloadPolicy(pin_memory=device.pin_memory) if cpu_offload else OffloadPolicy()
    weights_dtype = next(model.parameters()).dtype
    precision = (MixedPrecisionPolicy(param_dtype=torch.bfloat16, reduce_dtype=weights_dtype)
                 if bf16_compute and weights_dtype != torch.bfloat16 else MixedPrecisionPolicy())
    # One FSDP unit per decoder layer: only one layer's full weights exist at a time (fsdp),
    # and gradient reduction of a layer overlaps the backward of the layers below it.
    for layer in _decoder_layers(model):
        fully_shard(layer, mesh=mesh, offload_policy=offload, mp_policy=precision)
    # FSDP2 keeps the root's parameters gathered after forward, for the backward that follows;
    # a frozen model (the reference) has no backward, so it gives them back at once.
    frozen = not any(p.requires_grad for p in model.parameters())
    fully_shard(model, mesh=mesh, offload_policy=offload,  # embeddings, final norm, head
                mp_policy=precision, reshard_after_forward=True if frozen else None)
    _sum_gradients_across_ranks(model)
    # Each unit's dtypes settled now, while LoRA's adapters train: FSDP2 fixes a unit's
    # reduce dtype from its trainable parameters at its lazy init (the first forward), and
    # the first forward can be the reference's, under PEFT's disable_adapter, which sets the
    # adapters' requires_grad to False: their units then reduced bf16 gradients into fp32
    # weights and the update failed (found by tests/composition: LoRA with 2 ranks).
    model._get_fsdp_state()._lazy_init()
    model.forward_logprobs = types.MethodType(forward_logprobs, model)
    register_fsdp_forward_method(model, "forward_logprobs")
    return model


def reshard(model: torch.nn.Module) -> None:
    """Every unit's parameters back to this rank's shards (a no-op when they are), so that
    elementwise updates across two sharded models (Polyak) meet shards on both sides."""
    for module in model.modules():
        if isinstance(module, FSDPModule):
            module.reshard()


def sharded_forward_logprobs(model: torch.nn.Module, batch: PackedBatch, temperature: float,
                             with_entropy: bool = False
                             ) -> tuple[torch.Tensor, torch.Tensor | None]:
    """`forward_logprobs` for a model from `shard_policy`: inside the root's FSDP hooks (see the
    module docstring); the plain function for an unsharded model."""
    if isinstance(model, FSDPModule):
        return model.forward_logprobs(batch, temperature, with_entropy)
    return forward_logprobs(model, batch, temperature, with_entropy)


def _decoder_layers(model: torch.nn.Module) -> list[torch.nn.Module]:
    layers = decoder_layers(model)
    if layers is None:
        raise ValueError(f"{type(model).__name__} has no decoder `layers` to shard")
    return list(layers)


def _sum_gradients_across_ranks(model: torch.nn.Module) -> None:
    for module in model.modules():
        if isinstance(module, FSDPModule):
            module.set_gradient_divide_factor(1.0)
            module.set_force_sum_reduction_for_comms(True)


def full_weight_layout(model: torch.nn.Module) -> list[tuple[str, tuple[int, ...], torch.dtype]]:
    """(name, full shape, dtype) of every weight `iter_full_weights` yields, without gathering:
    a DTensor knows its global shape."""
    return [(name, tuple(t.shape), t.dtype) for name, t in model.state_dict().items()]


def iter_full_weights(model: torch.nn.Module) -> Iterator[tuple[str, torch.Tensor]]:
    """The model's full weights one tensor at a time, for streaming to engines: each sharded
    tensor is all-gathered when it is reached, so a rank holds one full tensor beyond its
    shards, never a second full model (`gather_full_state_dict` gathers everything at once).

    A collective per sharded tensor: every rank must run the iterator to its end, in step. A
    tensor offloaded to the host (`cpu_offload`) is gathered on the mesh's device."""
    for name, tensor in model.state_dict().items():
        if isinstance(tensor, DTensor):
            mesh_device = tensor.device_mesh.device_type
            if tensor.device.type != mesh_device:  # GPU only: shards offloaded to the host
                tensor = tensor.to(mesh_device)
            tensor = tensor.full_tensor()
        yield name, tensor.detach()


def gather_full_state_dict(model: torch.nn.Module,
                           world: World) -> dict[str, torch.Tensor] | None:
    """The full (unsharded) state dict on CPU on rank 0, None on other ranks.

    A collective: every rank must call it at the same point. Unsharded models (one process)
    return their own state dict, detached, without copying.
    """
    if not any(isinstance(m, FSDPModule) for m in model.modules()):
        if world.is_distributed:
            raise ValueError("a model trained on several ranks should be sharded")
        return {name: t.detach() for name, t in model.state_dict().items()}
    # cpu_offload=True makes torch keep the gathered tensors on rank 0 only (others get {}).
    full = get_model_state_dict(
        model, options=StateDictOptions(full_state_dict=True, cpu_offload=True))
    return full if world.is_main else None
