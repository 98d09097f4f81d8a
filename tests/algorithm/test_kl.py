"""KL estimators at hand-computed points, d = logp - logp_ref."""

import math

import pytest
import torch

from rlvr.algorithm.kl import all_kl_estimates, kl_penalty


@pytest.mark.parametrize("d, expected", [
    # k0 = d, k1 = d^2/2, k2 = expm1(-d) + d, k3 = e^d * d
    (0.5, [0.5, 0.125, (math.exp(-0.5) - 1) + 0.5, math.exp(0.5) * 0.5]),  # k2 0.10653, k3 0.82436
    (-1.0, [-1.0, 0.5, (math.e - 1) - 1.0, -math.exp(-1.0)]),  # k2 0.71828, k3 -0.36788
    (0.0, [0.0, 0.0, 0.0, 0.0]),
])
def test_each_estimator(d, expected):
    logp, ref = torch.tensor([d - 2.0]), torch.tensor([-2.0])
    for k in range(4):
        assert kl_penalty(logp, ref, k).item() == pytest.approx(expected[k], abs=1e-5)


def test_log_ratio_is_clamped_to_40():
    est = all_kl_estimates(torch.tensor([100.0]), torch.tensor([0.0]))
    assert est[0].item() == 40.0 and est[1].item() == 800.0
    assert est[2].item() == pytest.approx(39.0)  # expm1(-40) is -1 to float precision
    assert math.isfinite(est[3].item())


def test_unknown_estimator():
    with pytest.raises(ValueError):
        kl_penalty(torch.zeros(1), torch.zeros(1), 4)
