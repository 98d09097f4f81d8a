"""A step's distributions, not only its means: the per-sample rewards, response lengths and
advantages and the per-token importance ratio of the learner against the engine, each
summarised into a record of fixed size (`DistributionSummary`: count, min, max, mean, std,
five quantiles, a 32-bin histogram over the observed range) that the sinks write
(`distributions.jsonl`, TensorBoard and W&B histograms) and `rlvr report` draws.

The summary bounds the cost: a step of a million response tokens still writes a few hundred
numbers per distribution. numpy computes it (`np.quantile`, linear interpolation; `np.histogram`),
so nothing here is hand-rolled statistics.

Not here: writing (`rlvr.metrics.sinks`), drawing (`rlvr.report`), computing the ratio (the
learner's pre-update pass, `UpdateResult.engine_ratio_T`).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Mapping, Sequence

import numpy as np

from rlvr.run.paths import RunPaths
from rlvr.types import Sample

BINS = 32
QUANTILES = {"p5": 0.05, "p25": 0.25, "p50": 0.5, "p75": 0.75, "p95": 0.95}

# The distributions a training step records, and what one value of each is.
REWARD = "reward"  # per sample: every scored sample of the step, the reward trained on
RESPONSE_LENGTH = "response_length"  # per sample: every scored sample's completion, in tokens
ADVANTAGE = "advantage"  # per sample: the samples trained on (after filtering), one each
# per response token of the update: pi_learner / pi_engine of the sampled token, the learner's
# logprob taken before the update (what the mismatch gate's logprob diff is the log of)
LEARNER_ENGINE_RATIO = "learner_engine_ratio"


@dataclass(frozen=True)
class DistributionSummary:
    """One distribution of one step, of fixed size whatever the number of values. Non-finite
    values are counted in `nonfinite` and left out of everything else."""

    count: int  # finite values summarised
    nonfinite: int
    min: float
    max: float
    mean: float
    std: float  # population standard deviation (ddof 0)
    quantiles: dict[str, float]  # `QUANTILES`' names -> value, linear interpolation
    bin_edges: list[float]  # BINS + 1 edges, evenly over [min, max] (min +- 0.5 if all equal)
    bin_counts: list[int]  # BINS counts; the last bin includes its right edge

    def to_json(self) -> dict[str, Any]:
        return {"count": self.count, "nonfinite": self.nonfinite, "min": self.min,
                "max": self.max, "mean": self.mean, "std": self.std,
                "quantiles": dict(self.quantiles), "bin_edges": list(self.bin_edges),
                "bin_counts": list(self.bin_counts)}

    @classmethod
    def from_json(cls, record: Mapping[str, Any]) -> "DistributionSummary":
        """A summary as `to_json` wrote it; KeyError, TypeError or ValueError otherwise."""
        return cls(count=int(record["count"]), nonfinite=int(record["nonfinite"]),
                   min=float(record["min"]), max=float(record["max"]),
                   mean=float(record["mean"]), std=float(record["std"]),
                   quantiles={k: float(record["quantiles"][k]) for k in QUANTILES},
                   bin_edges=[float(x) for x in record["bin_edges"]],
                   bin_counts=[int(x) for x in record["bin_counts"]])


def summarize(values: Sequence[float] | np.ndarray) -> DistributionSummary | None:
    """The summary of 1-D `values`; None when none of them is finite (nothing to describe)."""
    array = np.asarray(values, dtype=np.float64).reshape(-1)
    finite = array[np.isfinite(array)]
    if finite.size == 0:
        return None
    low, high = float(finite.min()), float(finite.max())
    # All values equal: numpy's own convention, one unit around the value.
    span = (low, high) if high > low else (low - 0.5, high + 0.5)
    counts, edges = np.histogram(finite, bins=BINS, range=span)
    q = np.quantile(finite, list(QUANTILES.values()))
    return DistributionSummary(
        count=int(finite.size), nonfinite=int(array.size - finite.size), min=low, max=high,
        mean=float(finite.mean()), std=float(finite.std()),
        quantiles={name: float(v) for name, v in zip(QUANTILES, q)},
        bin_edges=[float(e) for e in edges], bin_counts=[int(c) for c in counts])


@dataclass(frozen=True)
class StepDistributions:
    """One training step's values, name (`REWARD`, ...) -> 1-D floats; a distribution the step
    did not have (no update: no advantages, no ratio) is absent."""

    values: dict[str, np.ndarray] = field(default_factory=dict)  # name -> [N] float

    def summaries(self) -> dict[str, DistributionSummary]:
        """Each distribution's summary, those without a finite value left out."""
        out = {name: summarize(v) for name, v in self.values.items()}
        return {name: s for name, s in out.items() if s is not None}


def step_distributions(groups: Sequence[Sequence[Sample]], trained: Sequence[Sample],
                       ratio_T=None) -> StepDistributions:
    """The distributions of a step: rewards and lengths of every scored sample in `groups`
    (those filtered out included: they are what the policy produced), advantages of the
    `trained` samples, and the update's per-token `ratio_T` ([T] tensor or array of
    pi_learner / pi_engine; None without an update)."""
    samples = [s for g in groups for s in g]
    values: dict[str, np.ndarray] = {}
    if samples:
        values[REWARD] = np.array([s.reward for s in samples], dtype=np.float64)
        values[RESPONSE_LENGTH] = np.array([len(s.completion.token_ids_T) for s in samples],
                                           dtype=np.float64)
    if trained:
        values[ADVANTAGE] = np.array([s.advantage for s in trained], dtype=np.float64)
    if ratio_T is not None and len(ratio_T):
        values[LEARNER_ENGINE_RATIO] = np.asarray(ratio_T, dtype=np.float64).reshape(-1)
    return StepDistributions(values)


def distributions_path(output_dir: Path) -> Path:
    """Where a run writes its step distributions (the sink) and the report reads them."""
    return RunPaths(output_dir).distributions
