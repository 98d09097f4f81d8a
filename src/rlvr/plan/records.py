"""The records `rlvr plan` passes between its stages: what the calibration measured
(`Calibration`), what the run is expected to take (`Prediction`), and their JSON form
(`<output_dir>/plan.json`, which `rlvr report` reads back).

Not here: measuring (`calibrate`), the arithmetic (`predict`), printing (`render`).
"""

from __future__ import annotations

import dataclasses
import json
from dataclasses import dataclass, field
from typing import Any

PLAN_FILE = "plan.json"  # in experiment.output_dir: the prediction the report compares with
PLAN_FORMAT = 1  # bumped when a field changes meaning


@dataclass(frozen=True)
class LinearCost:
    """A cost that grows linearly with a count: fixed + per_unit x count (seconds or bytes)."""

    fixed: float
    per_unit: float

    def at(self, count: float) -> float:
        return self.fixed + self.per_unit * count

    @classmethod
    def through(cls, small: tuple[float, float], large: tuple[float, float]) -> "LinearCost":
        """The line through two (count, cost) readings; neither part is taken below 0 (timing
        noise can make the larger reading look cheaper per unit than it is)."""
        (n1, c1), (n2, c2) = small, large
        if n2 <= n1:
            raise ValueError(f"the second reading ({n2}) must count more than the first ({n1})")
        per_unit = max((c2 - c1) / (n2 - n1), 0.0)
        return cls(fixed=max(c2 - per_unit * n2, 0.0), per_unit=per_unit)


@dataclass(frozen=True)
class RolloutCalibration:
    """What generating `num_samples` completions (the run's prompts x samples, capped at
    `max_tokens` new tokens) showed. Lengths are in tokens."""

    max_tokens: int  # the calibration's cap; == the run's response_length: whole completions
    num_samples: int
    prompt_tokens_mean: float
    # Completions that stopped (EOS or a stop string) before the cap, and their lengths; the
    # rest were cut at the cap and are predicted to run to the run's response_length.
    finished_lengths: tuple[int, ...]
    num_truncated: int
    # Engine seconds (scoring excluded) against decode steps (the longest completion of a call)
    generation_s: LinearCost
    scoring_s_per_sample: float
    # Of the groups, those whose rewards differ (None: completions were cut, rewards unknown)
    spread_fraction: float | None
    # Every completion's length in sample order (a group's samples together), a cut one's
    # taken as the run's response_length: what the packer is fed (lengths vary; a group
    # whose responses outgrow a row is split into two units, a row more)
    response_lengths: tuple[int, ...] = ()


@dataclass(frozen=True)
class LearnerCalibration:
    """Real learner updates over packed rows of `row_tokens` tokens: seconds against rows
    (fixed: the optimizer step and what does not grow with the batch), and the activation
    bytes of a forward and backward against tokens (`rlvr.learner.memory_plan.MemoryFit`'s
    line, from the allocator's peak on a GPU, the resident set's peak on a CPU)."""

    row_tokens: int
    update_s: LinearCost  # per_unit: seconds a row
    activation_bytes: LinearCost  # per_unit: bytes a token
    memory_source: str  # "allocator" | "resident set"
    # The learner's micro-batch budget once its memory plan chose one (a GPU), else the config's
    micro_batch_tokens: int | None = None


@dataclass(frozen=True)
class MemoryCalibration:
    """Bytes on the device the learner computes on (the host for a CPU run: the process's
    resident set, engine included, since the engine runs in-process)."""

    device_total: float
    before_model: float  # held before the model loads: runtime, libraries, data
    after_build: float  # held once policy, reference, engine and verifiers are built
    build_peak: float  # the most held while building (loading can pass through a peak)
    policy_params: float
    reference_params: float
    trainable_params: float  # gradients take as much; AdamW's two moments twice as much
    engine: float  # what building the engine added (its weights and KV cache)
    kv_cache: float  # of `engine`, a KV cache reserved up front (`reserved_kv_cache_bytes`), 0 if
    # the engine sizes it as it goes


@dataclass(frozen=True)
class Calibration:
    device: str  # what it ran on, in words
    engine: str  # the engine class that generated
    build_s: float  # data, model, learner, engine and verifiers built
    rollout: RolloutCalibration
    learner: LearnerCalibration
    memory: MemoryCalibration
    weight_sync_s: float
    seconds: float  # the whole calibration, build included


@dataclass(frozen=True)
class RunShape:
    """What the config says of a step's size (the parts of `Config` the arithmetic reads)."""

    num_steps: int
    prompts_per_step: int
    samples_per_prompt: int
    response_length: int
    pack_length: int
    packing: str  # algorithm.packing: how units go into rows
    share_prompts: bool
    filter_zero_std: bool
    num_mini_batches: int
    num_epochs: int
    micro_batches: int  # gradient accumulation steps per mini-batch
    micro_batch_tokens: int | None  # algorithm.max_tokens_per_micro_batch (None: no budget)
    async_steps: int


@dataclass(frozen=True)
class Prediction:
    """A run's expected tokens, seconds and bytes. Seconds are a step's averages; memory is
    the peak on the device the learner computes on."""

    tokens: dict[str, float]  # prompt, response, learner (packed) tokens a step; rows
    seconds: dict[str, float]  # generation, scoring, learner, weight_sync, step, total
    memory: dict[str, float]  # bytes by part, and peak, device_total
    fits: bool
    assumptions: list[str] = field(default_factory=list)  # what the figures take for granted


def to_json(obj: Any) -> dict[str, Any]:
    return dataclasses.asdict(obj)


def plan_record(calibration: Calibration, shape: RunShape, prediction: Prediction,
                meta: dict[str, Any]) -> dict[str, Any]:
    """What plan.json holds: the format, who made it and how, and the three records."""
    return {"format": PLAN_FORMAT, **meta, "shape": to_json(shape),
            "calibration": to_json(calibration), "prediction": to_json(prediction)}


def dumps(record: dict[str, Any]) -> str:
    return json.dumps(record, indent=2, sort_keys=False) + "\n"


def calibration_from_json(d: dict[str, Any]) -> Calibration:
    """A `Calibration` back from its JSON form (plan.json's "calibration"): to predict again
    from what was measured, with other arithmetic or another shape."""
    r, lc, m = d["rollout"], d["learner"], d["memory"]
    rollout = RolloutCalibration(**{
        **r, "generation_s": LinearCost(**r["generation_s"]),
        "finished_lengths": tuple(r["finished_lengths"]),
        "response_lengths": tuple(r.get("response_lengths", ()))})
    learner = LearnerCalibration(**{**lc, "update_s": LinearCost(**lc["update_s"]),
                                    "activation_bytes": LinearCost(**lc["activation_bytes"])})
    return Calibration(**{**d, "rollout": rollout, "learner": learner,
                          "memory": MemoryCalibration(**m)})
