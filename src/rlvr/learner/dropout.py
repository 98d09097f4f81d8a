"""Dropout off in every model the learner runs (policy and reference).

Why: the loss compares logprobs of the same tokens across forward passes: old logprobs (from the
first epoch's pass), later epochs, the reference, and the engine (which samples in eval mode).
Dropout gives each pass different noise, so the ratio and the KL measure noise instead of policy
change (measured before this: `val/ratio_var` 1.5e-4 at learning rate 0 on a model with
attention_dropout=0.1). open-instruct zeroes `nn.Dropout` modules; we also catch what they do
not cover:
- rates kept as float attributes of modules (Llama's `attention_dropout`), handed to sdpa while
  `training` is true;
- rates read from the model's config inside `forward` (Falcon's `dropout_add(...,
  self.config.hidden_dropout, ...)`, GPT-Neo's and Persimmon's `self.config.attention_dropout`
  for sdpa): two train-mode passes of a tiny Falcon differed by 0.31 in the logits with those
  left on. Every config the model's modules hold, and the sub-configs inside it (a text or a
  vision config), has its dropout probabilities zeroed: attributes named like one
  (`DROPOUT_NAME`: `attention_dropout`, `resid_pdrop`, `attention_probs_dropout_prob`,
  `drop_path_rate`, `encoder_layerdrop`, ...) holding a float in [0, 1]. The model's config then
  reads 0 for them, and so does the config.json of a checkpoint saved from it: the rates the
  model was trained with.

Not `model.eval()`: gradient checkpointing in transformers runs only in training mode.

LoRA's own dropout (`model.lora.dropout`, on the adapter's input) is the one exception: the user
sets it on purpose, so it is kept (`keep`). Its default is 0 for the reason above.
"""

from __future__ import annotations

import re
from typing import Any, Callable, Iterator

import torch
from transformers import PretrainedConfig

# Attribute names that hold a dropout probability (of a module or of a config).
DROPOUT_NAME = re.compile(r"dropout|pdrop|drop_prob|drop_rate|drop_path|layerdrop")


def disable_dropout(model: torch.nn.Module,
                    keep: Callable[[str], bool] = lambda module_name: False) -> int:
    """Zero every dropout rate in `model` in place: `nn.Dropout` modules and rates kept on
    modules, except in modules whose name `keep` accepts, and rates in the model's configs.
    Returns how many were non-zero."""
    changed = 0
    for name, module in model.named_modules():
        if keep(name):
            continue
        if isinstance(module, torch.nn.modules.dropout._DropoutNd):
            changed += module.p > 0
            module.p = 0.0
        changed += _zero_rates(module)
    for config in _configs(model):
        changed += _zero_rates(config)
    return changed


def _is_rate(name: str, value: Any) -> bool:
    return (DROPOUT_NAME.search(name.lower()) is not None and isinstance(value, float)
            and 0.0 <= value <= 1.0)


def _zero_rates(holder: Any) -> int:
    """Zero the float dropout rates among `holder`'s attributes; how many were non-zero."""
    changed = 0
    for name, value in list(vars(holder).items()):
        if _is_rate(name, value):
            changed += value > 0
            setattr(holder, name, 0.0)
    return changed


def _configs(model: torch.nn.Module) -> Iterator[PretrainedConfig]:
    """Each distinct config the model's modules hold, and the configs nested in them."""
    seen: set[int] = set()
    stack = [getattr(m, "config", None) for m in model.modules()]
    while stack:
        config = stack.pop()
        if not isinstance(config, PretrainedConfig) or id(config) in seen:
            continue
        seen.add(id(config))
        yield config
        stack += [v for v in vars(config).values() if isinstance(v, PretrainedConfig)]
