"""Learning-rate schedules by name, built by transformers' `get_scheduler` (no need to rewrite
warm-up/decay curves): the names and curves are transformers' (open-instruct passes its
`lr_scheduler_type` the same way). Steps are optimizer steps. What it is not: the warm-up's
length, which the config resolves (`Config.warm_up_optimizer_steps`: steps, or a ratio of the
run's)."""

from __future__ import annotations

import torch
from transformers import get_scheduler

SCHEDULES = ("linear", "cosine", "cosine_with_restarts", "polynomial", "constant",
             "constant_with_warmup")


def build_scheduler(name: str, optimizer: torch.optim.Optimizer, warm_up_steps: int,
                    total_steps: int, num_cycles: int = 1, lr_end: float = 1e-7,
                    power: float = 1.0) -> torch.optim.lr_scheduler.LRScheduler:
    """`num_cycles`: cosine_with_restarts' hard restarts; `lr_end`, `power`: polynomial's
    final rate and power (transformers' defaults)."""
    if name not in SCHEDULES:
        raise ValueError(f"lr_scheduler_type='{name}' is not one of {SCHEDULES}")
    if name == "constant" and warm_up_steps > 0:
        name = "constant_with_warmup"  # a warm-up asked for is a warm-up given
    extra = {"cosine_with_restarts": {"num_cycles": num_cycles},
             "polynomial": {"lr_end": lr_end, "power": power}}.get(name)
    return get_scheduler(name, optimizer=optimizer, num_warmup_steps=warm_up_steps,
                         num_training_steps=max(total_steps, 1), scheduler_specific_kwargs=extra)
