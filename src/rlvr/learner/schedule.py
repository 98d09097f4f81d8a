"""Learning-rate schedules by name, built by transformers' `get_scheduler` (no need to rewrite
warm-up/decay curves). Steps are optimizer steps."""

from __future__ import annotations

import torch
from transformers import get_scheduler

SCHEDULES = ("linear", "cosine", "constant", "constant_with_warmup")


def build_scheduler(name: str, optimizer: torch.optim.Optimizer, warm_up_steps: int,
                    total_steps: int) -> torch.optim.lr_scheduler.LRScheduler:
    if name not in SCHEDULES:
        raise ValueError(f"lr_scheduler_type='{name}' is not one of {SCHEDULES}")
    if name == "constant" and warm_up_steps > 0:
        name = "constant_with_warmup"  # a warm-up asked for is a warm-up given
    return get_scheduler(name, optimizer=optimizer, num_warmup_steps=warm_up_steps,
                         num_training_steps=max(total_steps, 1))
