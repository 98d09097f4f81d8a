"""The learner's training state keyed by parameter name, as `Learner.training_state` saves it:
the policy's weights and the optimizer's state, read and restored through
`torch.distributed.checkpoint`'s full state dicts, which read a plain module without any process
group and gather a sharded one, so one process and any number of ranks share one format.

What it is not: the files (`rlvr.checkpoint`), or the sharded checkpoints each rank writes
(`rlvr.checkpoint.sharded`).
"""

from __future__ import annotations

import dataclasses
from typing import Any

import torch
from torch.distributed.checkpoint.state_dict import (StateDictOptions, get_model_state_dict,
                                                     get_optimizer_state_dict,
                                                     set_model_state_dict,
                                                     set_optimizer_state_dict)

from rlvr.learner.lora import check_adapter_state

# Full (unsharded) state on CPU. On a sharded model every rank must ask (a collective) and rank 0
# gets it, the others empty dicts; a plain module needs no process group.
FULL_STATE = StateDictOptions(full_state_dict=True, cpu_offload=True)


def optimizer_state_by_name(model: torch.nn.Module,
                            optimizer: torch.optim.Optimizer) -> dict[str, Any]:
    """The optimizer's full state keyed by parameter name (`get_optimizer_state_dict`).

    An optimizer that has not stepped saves an empty `state` and stays untouched: DCP would give
    it one zero-learning-rate step to have something to return, and that step count of 1 would
    change the bias correction of the first real step, so saving would change the run."""
    fresh = not optimizer.state
    state = get_optimizer_state_dict(model, optimizer, options=FULL_STATE)
    if fresh:
        optimizer.state.clear()
        if state:  # rank 0 (the other ranks of a sharded model hold {})
            state["state"] = {}
    return state


def load_optimizer_state_by_name(model: torch.nn.Module, optimizer: torch.optim.Optimizer,
                                 state: dict[str, Any], options: StateDictOptions,
                                 fresh: bool) -> None:
    """Restore what `optimizer_state_by_name` returned. `fresh`: its `state` is empty (saved
    before the first step); every rank of a sharded model must pass the same value."""
    if any(isinstance(name, int) for group in state.get("param_groups", [])
           for name in group["params"]):
        raise ValueError("the optimizer state is keyed by parameter index, as the local launcher "
                         "wrote it before states were keyed by name; it cannot be restored")
    set_optimizer_state_dict(model, optimizer, state, options=options)
    if fresh:  # DCP stepped it once at zero learning rate to create state: fresh again
        optimizer.state.clear()


def _has_frozen_parameters(model: torch.nn.Module) -> bool:
    return any(not p.requires_grad for p in model.parameters())


def policy_state_by_name(model: torch.nn.Module) -> dict[str, torch.Tensor]:
    """The policy's full state keyed by name, as the optimizer's: every weight of a plain
    model; only the trainable ones of a model with a frozen part (a LoRA base, reloaded from
    the model directory on resume, so states stay the adapters' size). A collective on a
    sharded model; rank 0 gets it."""
    if not _has_frozen_parameters(model):
        return get_model_state_dict(model, options=FULL_STATE)
    state = get_model_state_dict(model, options=dataclasses.replace(FULL_STATE,
                                                                    ignore_frozen_params=True))
    # DCP leaves a frozen weight tied to another in (lm_head to the embeddings): drop it too.
    trainable = {name for name, p in model.named_parameters() if p.requires_grad}
    return {name: tensor for name, tensor in state.items() if name in trainable}


def load_policy_state_by_name(model: torch.nn.Module, state: dict[str, torch.Tensor],
                              options: StateDictOptions) -> None:
    """Restore what `policy_state_by_name` returned (rank 0's, broadcast when `options` says
    so; the other ranks pass {}). A model with a frozen part takes its trainable weights only,
    checked by name first, and keeps its frozen ones."""
    if _has_frozen_parameters(model):
        if state:
            check_adapter_state(model, state)
        options = dataclasses.replace(options, strict=False)
    set_model_state_dict(model, state, options=options)
