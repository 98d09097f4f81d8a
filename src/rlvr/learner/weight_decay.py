"""Which parameters AdamW decays: weight matrices and embeddings, not biases or norm weights.

Decay pulls a weight toward 0. For a matrix that is a prior toward small activations; for a
norm's gain, whose neutral value is 1, and for a bias it only drags the layer's output scale or
offset, so the usual practice (open-instruct's `get_optimizer_grouped_parameters`, its default
for grpo_fast; nanoGPT, transformers' Trainer) leaves them out. A parameter is left out when it
is 1-D (every bias and norm gain) or named as one ("bias", "norm.weight", "layernorm.weight",
"layer_norm.weight", "ln_f.weight"). What it is not: a choice of decay rate; that is
`optimizer.weight_decay`.
"""

from __future__ import annotations

from typing import Any

import torch

_NO_DECAY_NAMES = ("bias", "norm.weight", "layernorm.weight", "layer_norm.weight", "ln_f.weight")


def is_decayed(name: str, param: torch.Tensor) -> bool:
    """Whether AdamW's weight decay applies to this parameter."""
    return param.ndim >= 2 and not any(part in name for part in _NO_DECAY_NAMES)


def decay_param_groups(model: torch.nn.Module, trainable: list[torch.nn.Parameter],
                       weight_decay: float) -> list[dict[str, Any]] | list[torch.nn.Parameter]:
    """AdamW's parameter groups: `trainable` (parameters of `model`) split into those decayed
    at `weight_decay` and those at 0. No decay at all: `trainable` itself, one group, as a run
    without decay always had (its saved optimizer state keeps its shape)."""
    if weight_decay == 0.0:
        return trainable
    wanted = {id(p) for p in trainable}
    decayed, kept = [], []
    for name, param in model.named_parameters():
        if id(param) in wanted:
            (decayed if is_decayed(name, param) else kept).append(param)
    groups = [{"params": decayed, "weight_decay": weight_decay},
              {"params": kept, "weight_decay": 0.0}]
    return [g for g in groups if g["params"]]
