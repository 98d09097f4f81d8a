"""The learner's per-token importance ratio against the engine (`UpdateResult.engine_ratio_T`,
the `learner_engine_ratio` distribution): exp(local - engine) over response tokens only,
strided down to a bounded sample."""

import math
from types import SimpleNamespace

import torch

import rlvr.learner.learner as learner_module
from rlvr.learner.learner import _FirstPassStats


def _pass(local, engine, mask):
    return (SimpleNamespace(response_mask_RL=torch.tensor(mask),
                            engine_logprobs_RL=torch.tensor(engine)),
            torch.tensor(local), torch.zeros(len(local), len(local[0])))


def test_ratio_is_local_over_engine_on_response_tokens_of_every_pass():
    stats = _FirstPassStats()
    assert stats.ratio_T() is None
    # log(local / engine): 0 (ratio 1), log 2, and a padded token that must not count
    stats.add(*_pass([[-1.0, -1.0 + math.log(2.0), 5.0]], [[-1.0, -1.0, 0.0]],
                     [[True, True, False]]))
    stats.add(*_pass([[-2.0]], [[-2.0 + math.log(4.0)]], [[True]]))  # ratio 1/4
    assert torch.allclose(stats.ratio_T(), torch.tensor([1.0, 2.0, 0.25]))


def test_ratio_sample_is_bounded_by_an_even_stride(monkeypatch):
    monkeypatch.setattr(learner_module, "MAX_RATIO_VALUES", 4)
    stats = _FirstPassStats()
    log_ratio = torch.arange(10.0).log1p()  # ratios 1..10
    stats.add(*_pass([log_ratio.tolist()], [[0.0] * 10], [[True] * 10]))
    # 10 values, at most 4: every third (ceil(10 / 4) = 3), ratios 1, 4, 7, 10
    assert torch.allclose(stats.ratio_T(), torch.tensor([1.0, 4.0, 7.0, 10.0]))
