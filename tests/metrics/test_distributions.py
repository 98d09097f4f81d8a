"""A step's distributions: the fixed-size summary against values worked out by hand, and
which samples and tokens each distribution holds."""

import math

import numpy as np
import pytest
import torch

from rlvr.metrics.distributions import (ADVANTAGE, BINS, LEARNER_ENGINE_RATIO, RESPONSE_LENGTH,
                                        REWARD, DistributionSummary, StepDistributions,
                                        step_distributions, summarize)
from rlvr.types import Completion, Prompt, Sample


def test_summary_of_one_to_five_by_hand():
    s = summarize([3.0, 1.0, 5.0, 2.0, 4.0])
    assert (s.count, s.nonfinite, s.min, s.max, s.mean) == (5, 0, 1.0, 5.0, 3.0)
    assert s.std == pytest.approx(math.sqrt(2.0))  # deviations 4+1+0+1+4 over 5
    # Linear interpolation at (n - 1) q = 4q: p5 at 0.2 -> 1.2, p25 at 1 -> 2, p95 at 3.8 -> 4.8
    assert s.quantiles == pytest.approx({"p5": 1.2, "p25": 2.0, "p50": 3.0, "p75": 4.0,
                                         "p95": 4.8})
    # 32 bins of width 4/32 = 0.125 over [1, 5]: 1 in bin 0, 2 in bin 8, 3 in 16, 4 in 24, and 5
    # on the right edge, in the last bin.
    assert len(s.bin_edges) == BINS + 1 and s.bin_edges[0] == 1.0 and s.bin_edges[-1] == 5.0
    assert s.bin_edges[1] == 1.125
    assert [i for i, c in enumerate(s.bin_counts) if c] == [0, 8, 16, 24, 31]
    assert sum(s.bin_counts) == 5


def test_equal_values_get_a_unit_wide_range_and_non_finite_ones_are_counted_apart():
    s = summarize([2.0, 2.0, math.nan, math.inf])
    assert (s.count, s.nonfinite, s.min, s.max, s.std) == (2, 2, 2.0, 2.0, 0.0)
    assert s.bin_edges[0] == 1.5 and s.bin_edges[-1] == 2.5
    assert s.bin_counts[16] == 2 and sum(s.bin_counts) == 2  # 2.0 starts the middle bin
    assert set(s.quantiles.values()) == {2.0}
    assert summarize([]) is None and summarize([math.nan]) is None


def test_summary_round_trips_through_json():
    s = summarize(np.arange(100.0))
    assert DistributionSummary.from_json(s.to_json()) == s
    with pytest.raises(KeyError):
        DistributionSummary.from_json({"count": 1})


def test_the_summary_stays_fixed_size_for_a_million_values():
    s = summarize(np.random.default_rng(0).normal(size=1_000_000))
    assert len(s.to_json()["bin_counts"]) == BINS and s.count == 1_000_000
    assert s.quantiles["p50"] == pytest.approx(0.0, abs=0.01)


def _sample(reward: float, tokens: int, advantage: float = 0.0) -> Sample:
    prompt = Prompt(id="p", messages=({"role": "user", "content": "q"},), token_ids=(1,),
                    ground_truth="1", verifiers=("last_number",), source="t")
    return Sample(prompt=prompt, completion=Completion(
        token_ids_T=[7] * tokens, logprobs_T=[0.0] * tokens, finish_reason="stop", text="x",
        model_version=0), reward=reward, advantage=advantage)


def test_a_step_holds_every_scored_sample_the_trained_advantages_and_the_token_ratios():
    solved = [_sample(1.0, 3), _sample(1.0, 5)]  # no spread: filtered, not trained
    mixed = [_sample(1.0, 2, 0.5), _sample(0.0, 4, -0.5)]
    step = step_distributions([solved, mixed], trained=mixed,
                              ratio_T=torch.tensor([1.0, 0.5, 2.0]))
    assert step.values[REWARD].tolist() == [1.0, 1.0, 1.0, 0.0]
    assert step.values[RESPONSE_LENGTH].tolist() == [3.0, 5.0, 2.0, 4.0]
    assert step.values[ADVANTAGE].tolist() == [0.5, -0.5]
    assert step.values[LEARNER_ENGINE_RATIO].tolist() == [1.0, 0.5, 2.0]
    summaries = step.summaries()
    assert summaries[RESPONSE_LENGTH].mean == 3.5
    assert summaries[REWARD].quantiles["p5"] == pytest.approx(0.15)  # 0 + 3 x 0.05 of the way to 1


def test_a_step_without_an_update_has_no_advantages_nor_ratios():
    step = step_distributions([[_sample(0.0, 2), _sample(0.0, 2)]], trained=[])
    assert set(step.values) == {REWARD, RESPONSE_LENGTH}
    assert StepDistributions({"x": np.array([math.nan])}).summaries() == {}
