"""`rlvr plan CONFIG`: before launch, what a run will take on this machine: memory per part,
tokens a step, a step's seconds split into generation, scoring, learner and weight sync, the
whole run's time, and whether it fits.

A short calibration (`calibrate`: the run's pieces built by `rlvr.run.build`, a capped generation,
real learner updates over one and two packed rows, a weight sync) feeds pure arithmetic
(`predict`); `render` prints it, and `<output_dir>/plan.json` (`records.PLAN_FILE`) keeps it
for `rlvr report`, which sets it beside what the run measured. Figures and their accuracy:
docs/plan.md.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

from rlvr.config import Config
from rlvr.plan.records import (PLAN_FILE, Calibration, Prediction, RunShape, dumps,
                               plan_record)
from rlvr.run.paths import RunPaths

__all__ = ["PLAN_FILE", "Calibration", "Prediction", "RunShape", "make_plan", "run_shape",
           "write_plan"]


def run_shape(cfg: Config, calibration: Calibration) -> RunShape:
    """The step's shape as the config (and the learner's memory plan, on a GPU) sets it."""
    from rlvr.run.build import plan_devices

    r, a = cfg.rollout, cfg.algorithm
    return RunShape(
        num_steps=cfg.num_training_steps, prompts_per_step=r.num_unique_prompts_rollout,
        samples_per_prompt=r.num_samples_per_prompt_rollout,
        response_length=r.response_length, pack_length=a.pack_length, packing=a.packing,
        share_prompts=plan_devices(cfg, None).share_prompts,
        filter_zero_std=a.filter_zero_std_samples, num_mini_batches=a.num_mini_batches,
        num_epochs=a.num_epochs, micro_batches=cfg.gradient_accumulation_steps,
        micro_batch_tokens=calibration.learner.micro_batch_tokens, async_steps=r.async_steps)


def make_plan(cfg: Config, gen_tokens: int | None = None,
              described: str = "") -> dict[str, Any]:
    """Calibrate on this machine and predict: the plan record (what plan.json holds).
    `gen_tokens`: the calibration's cap on new tokens (None: the run's response_length)."""
    from rlvr.plan.calibrate import calibrate
    from rlvr.plan.predict import predict

    calibration = calibrate(cfg, gen_tokens)
    shape = run_shape(cfg, calibration)
    meta = {"config": described, "output_dir": str(cfg.experiment.output_dir),
            "created": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())}
    return plan_record(calibration, shape, predict(calibration, shape), meta)


def write_plan(record: dict[str, Any], output_dir: Path | str) -> Path:
    """`<output_dir>/plan.json`, written whole (a reader never sees half of it)."""
    from rlvr.checkpoint import write_text_atomic

    path = RunPaths(output_dir).plan
    path.parent.mkdir(parents=True, exist_ok=True)
    write_text_atomic(path, dumps(record))
    return path
