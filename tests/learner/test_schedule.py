"""The LR schedules open-instruct takes from transformers (cosine_with_restarts, polynomial, a
warm-up given as a ratio of the run) give transformers' own values: the config is resolved
(`learner_settings`), the learner's scheduler built from it and stepped, and each rate compared
with transformers' scheduler function of that name stepped alike."""

import pytest
import torch
from transformers import TrainingArguments
from transformers.optimization import (get_cosine_with_hard_restarts_schedule_with_warmup,
                                       get_polynomial_decay_schedule_with_warmup)

from rlvr.config import ConfigError, load_config
from rlvr.learner.schedule import build_scheduler
from rlvr.run.settings import learner_settings

# 48 episodes of 4 x 4 samples: 3 training steps; 2 epochs x 3 mini-batches: 18 optimizer steps.
RUN = ["experiment.total_episodes=48", "rollout.num_unique_prompts_rollout=4",
       "rollout.num_samples_per_prompt_rollout=4", "algorithm.num_epochs=2",
       "algorithm.num_mini_batches=3", "algorithm.gradient_accumulation_steps=1",
       "optimizer.learning_rate=1e-3"]
TOTAL = 18


def _optimizer():
    return torch.optim.AdamW([torch.nn.Parameter(torch.zeros(1))], lr=1e-3)


def _rates(scheduler, steps=TOTAL):
    out = []
    for _ in range(steps):
        out.append(scheduler.optimizer.param_groups[0]["lr"])
        scheduler.optimizer.step()
        scheduler.step()
    return out


def _ours(overrides):
    s = learner_settings(load_config(None, RUN + overrides))
    assert s.total_optimizer_steps == TOTAL
    return _rates(build_scheduler(s.lr_scheduler_type, _optimizer(), s.warm_up_steps,
                                  s.total_optimizer_steps, num_cycles=s.lr_num_cycles,
                                  lr_end=s.lr_end, power=s.lr_power))


def test_cosine_with_restarts_is_transformers():
    ours = _ours(["optimizer.lr_scheduler_type=cosine_with_restarts",
                  "optimizer.lr_num_cycles=3", "optimizer.warm_up_steps=2"])
    theirs = _rates(get_cosine_with_hard_restarts_schedule_with_warmup(
        _optimizer(), num_warmup_steps=2, num_training_steps=TOTAL, num_cycles=3))
    assert ours == pytest.approx(theirs, rel=1e-12)
    # three hard restarts: the rate climbs back to the peak twice after warm-up
    assert sum(1 for a, b in zip(ours[2:], ours[3:]) if b > a) == 2


def test_polynomial_is_transformers():
    ours = _ours(["optimizer.lr_scheduler_type=polynomial", "optimizer.lr_end=1e-5",
                  "optimizer.lr_power=2.0", "optimizer.warm_up_steps=3"])
    theirs = _rates(get_polynomial_decay_schedule_with_warmup(
        _optimizer(), num_warmup_steps=3, num_training_steps=TOTAL, lr_end=1e-5, power=2.0))
    assert ours == pytest.approx(theirs, rel=1e-12)
    assert ours[3] == pytest.approx(1e-3) and ours[-1] < 1e-4


@pytest.mark.parametrize("ratio", [0.1, 0.25, 0.5])
def test_warmup_ratio_is_transformers_warm_up(ratio):
    # transformers 5 takes the ratio as a warmup_steps below 1 (4.x: warmup_ratio), rounded up.
    expected = TrainingArguments(output_dir="unused", warmup_steps=ratio,
                                 report_to=[]).get_warmup_steps(TOTAL)
    settings = learner_settings(load_config(None, RUN + [f"optimizer.warmup_ratio={ratio}"]))
    assert settings.warm_up_steps == expected
    ours = _ours(["optimizer.lr_scheduler_type=linear", f"optimizer.warmup_ratio={ratio}"])
    assert ours[expected] == pytest.approx(1e-3) and ours[expected - 1] < 1e-3


def test_conflicting_or_impossible_schedule_settings_are_refused():
    with pytest.raises(ConfigError, match="both set the warm-up"):
        load_config(None, RUN + ["optimizer.warm_up_steps=2", "optimizer.warmup_ratio=0.1"])
    with pytest.raises(ConfigError, match="optimizer.lr_end=0.01 .* must be below"):
        load_config(None, RUN + ["optimizer.lr_scheduler_type=polynomial",
                                 "optimizer.lr_end=1e-2"])
    with pytest.raises(ConfigError, match="optimizer.warmup_ratio=1.0 must be in"):
        load_config(None, RUN + ["optimizer.warmup_ratio=1.0"])
