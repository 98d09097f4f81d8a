"""KL estimators at hand-computed points (d = logp - logp_ref, ratio = exp(logp - logp_old)),
and their expectations over an exact distribution against the true KL."""

import math

import pytest
import torch

from rlvr.algorithm.kl import all_kl_estimates, kl_penalty
from rlvr.algorithm.losses import LossInputs, LossParams, compute_policy_loss, summarize_loss_metrics


@pytest.mark.parametrize("d, ratio, expected", [
    # k0 = d, k1 = d^2/2, k2 = expm1(-d) + d, k3 = ratio * d
    (0.5, 1.0, [0.5, 0.125, (math.exp(-0.5) - 1) + 0.5, 0.5]),  # k2 0.10653
    (0.5, 2.0, [0.5, 0.125, (math.exp(-0.5) - 1) + 0.5, 1.0]),
    (-1.0, 0.5, [-1.0, 0.5, (math.e - 1) - 1.0, -0.5]),  # k2 0.71828
    (0.0, 3.0, [0.0, 0.0, 0.0, 0.0]),
])
def test_each_estimator(d, ratio, expected):
    logp, ref = torch.tensor([d - 2.0]), torch.tensor([-2.0])
    for k in range(4):
        assert kl_penalty(logp, ref, torch.tensor([ratio]), k).item() == pytest.approx(
            expected[k], abs=1e-5)


def test_log_ratio_is_clamped_to_40():
    est = all_kl_estimates(torch.tensor([100.0]), torch.tensor([0.0]), torch.tensor([1.0]))
    assert est[0].item() == 40.0 and est[1].item() == 800.0
    assert est[2].item() == pytest.approx(39.0)  # expm1(-40) is -1 to float precision
    assert est[3].item() == 40.0


def test_unknown_estimator():
    with pytest.raises(ValueError):
        kl_penalty(torch.zeros(1), torch.zeros(1), torch.ones(1), 4)


# An exact distribution over 6 tokens, laid out as 32 tokens in proportion to their
# probability (16, 8, 4, 2, 1, 1), so a token mean is the exact expectation under it. The
# reference is uniform, q = 1/6. Worked by hand:
# KL(p || q) = sum p log(6 p) = 0.5 ln 3 + 0.25 ln 1.5 + 0.125 ln 0.75 + 0.0625 ln 0.375
#              + 2 * 0.03125 ln 0.1875 = 0.448787.
COUNTS = [16, 8, 4, 2, 1, 1]
P = [c / 32 for c in COUNTS]
TRUE_KL = 0.448787


def _tokens(probs):
    return torch.tensor([[math.log(probs[i]) for i, c in enumerate(COUNTS) for _ in range(c)]])


def _kl_metrics(new_probs):
    """KL metrics of the loss over the 32 tokens sampled from P, the current policy at
    `new_probs` (the sampling policy is P: old logprobs are P's)."""
    new, old = _tokens(new_probs), _tokens(P)
    ref = torch.full_like(new, math.log(1 / 6))
    inputs = LossInputs(new.requires_grad_(True), old, torch.zeros_like(new),
                        torch.ones_like(new, dtype=torch.bool), ref_logprobs_RL=ref)
    out = compute_policy_loss("dapo", inputs, LossParams(0.2, 0.2, 0.0, 3, denominator=32.0))
    return summarize_loss_metrics(out.sums)


def test_on_policy_every_unbiased_estimator_gives_the_true_kl():
    # The policy that sampled is the current one (ratio 1): k0, k2 and k3 average to the true
    # KL. The previous k3, exp(d) * d, averaged to 1.730 here: it estimated E_p[(p/q) log(p/q)].
    m = _kl_metrics(P)
    for k in (0, 2, 3):
        assert m[f"objective/kl{k}_avg"] == pytest.approx(TRUE_KL, abs=1e-5)


def test_off_policy_the_ratio_makes_estimator_3_unbiased():
    # Tokens sampled from P, current policy p' = (0.4, 0.2, 0.2, 0.1, 0.05, 0.05):
    # E_P[(p'/P) log(6 p')] = KL(p' || q) = 0.251636, by hand; plain d averages to
    # E_P[log(6 p')] = 0.398930, which is not a KL of anything.
    m = _kl_metrics([0.4, 0.2, 0.2, 0.1, 0.05, 0.05])
    assert m["objective/kl3_avg"] == pytest.approx(0.251636, abs=1e-5)
    assert m["objective/kl0_avg"] == pytest.approx(0.398930, abs=1e-5)


def _exact_kl_gradient(reverse):
    """d KL / d theta for the policy softmax(theta) at P against the uniform reference:
    KL(policy || ref), or with `reverse` KL(ref || policy)."""
    theta = torch.tensor([math.log(p) for p in P], dtype=torch.float64, requires_grad=True)
    logp = torch.log_softmax(theta, 0)
    logq = torch.full_like(logp, math.log(1 / 6))
    kl = (logq.exp() * (logq - logp)).sum() if reverse else (logp.exp() * (logp - logq)).sum()
    kl.backward()
    return theta.grad


def _loss_gradient(estimator):
    """The gradient of beta * estimator as rlvr's loss over the 32 tokens sampled from P,
    on-policy (ratio 1), no advantage: its expectation under P, exactly."""
    theta = torch.tensor([math.log(p) for p in P], dtype=torch.float64, requires_grad=True)
    tokens = torch.tensor([i for i, c in enumerate(COUNTS) for _ in range(c)])
    new = torch.log_softmax(theta, 0)[tokens][None]
    old = new.detach()
    inputs = LossInputs(new, old, torch.zeros_like(old), torch.ones_like(old, dtype=torch.bool),
                        ref_logprobs_RL=torch.full_like(old, math.log(1 / 6)))
    compute_policy_loss("dapo", inputs, LossParams(0.2, 0.2, 1.0, estimator,
                                                   denominator=32.0)).loss.backward()
    return theta.grad


@pytest.mark.parametrize("estimator, follows", [
    (1, "forward"), (2, "reverse"), (3, "forward"), (0, "nothing")])
def test_each_estimator_s_gradient_as_a_loss_is_the_documented_kl_s(estimator, follows):
    """What a KL penalty trains is its gradient: 1 and 3 pull toward KL(policy || ref), 2 (the
    default, GRPO's) toward KL(ref || policy), and 0 toward nothing, which is why the config
    refuses beta > 0 with it (`rlvr.config.checks`)."""
    got = _loss_gradient(estimator)
    forward, reverse = _exact_kl_gradient(False), _exact_kl_gradient(True)
    assert not torch.allclose(forward, reverse, atol=1e-3)  # the two are told apart here
    want = {"forward": forward, "reverse": reverse, "nothing": torch.zeros_like(forward)}[follows]
    assert torch.allclose(got, want, atol=1e-6), (got, want)
