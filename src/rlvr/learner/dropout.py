"""Dropout off in every model the learner runs (policy and reference).

Why: the loss compares logprobs of the same tokens across forward passes: old logprobs (from the
first epoch's pass), later epochs, the reference, and the engine (which samples in eval mode).
Dropout gives each pass different noise, so the ratio and the KL measure noise instead of policy
change (measured before this: `val/ratio_var` 1.5e-4 at learning rate 0 on a model with
attention_dropout=0.1). open-instruct zeroes dropout the same way; we also catch what
`nn.Dropout` does not cover: Hugging Face attention modules keep their rate as a float
attribute (Llama's `attention_dropout`) handed to sdpa while `training` is true.

Not `model.eval()`: gradient checkpointing in transformers runs only in training mode.

LoRA's own dropout (`model.lora.dropout`, on the adapter's input) is the one exception: the user
sets it on purpose, so it is kept (`keep`). Its default is 0 for the reason above.
"""

from __future__ import annotations

from typing import Callable

import torch


def disable_dropout(model: torch.nn.Module,
                    keep: Callable[[str], bool] = lambda module_name: False) -> int:
    """Zero every dropout rate in `model` in place, except in modules whose name `keep`
    accepts; returns how many were non-zero."""
    changed = 0
    for name, module in model.named_modules():
        if keep(name):
            continue
        if isinstance(module, torch.nn.modules.dropout._DropoutNd):
            changed += module.p > 0
            module.p = 0.0
        for name, value in vars(module).items():
            # float rates kept on modules (attention_dropout, dropout, hidden_dropout, ...)
            if "dropout" in name and isinstance(value, float) and not isinstance(value, bool):
                changed += value > 0
                setattr(module, name, 0.0)
    return changed
