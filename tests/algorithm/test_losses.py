"""Policy losses against hand-computed values, normalisation, masking and batch splitting."""

import math

import pytest
import torch

from rlvr.algorithm.losses import (LossInputs, LossParams, compute_policy_loss,
                                   normalization_unit, summarize_loss_metrics)

PARAMS = LossParams(clip_lower=0.2, clip_higher=0.2, beta=0.0, kl_estimator=2, denominator=1.0)


def _one_token(log_ratio, advantage, old=-1.0):
    new = torch.tensor([[old + log_ratio]], requires_grad=True)
    inputs = LossInputs(new_logprobs_RL=new, old_logprobs_RL=torch.tensor([[old]]),
                        advantages_RL=torch.tensor([[advantage]]),
                        response_mask_RL=torch.tensor([[True]]))
    return new, inputs


@pytest.mark.parametrize("log_ratio, adv, loss, grad, lower, upper", [
    # ratio e^0.1 = 1.10517 inside [0.8, 1.2]: loss -A r, d/dlogp = -A r
    (0.1, 1.0, -1.10517, -1.10517, 0, 0),
    # ratio e^0.5 = 1.64872, A > 0: clipped to 1.2, loss -1.2, no gradient
    (0.5, 1.0, -1.2, 0.0, 0, 1),
    # same ratio, A < 0: min picks the unclipped -1.64872, loss +1.64872, gradient +r
    (0.5, -1.0, 1.64872, 1.64872, 0, 0),
    # ratio e^-0.5 = 0.60653, A < 0: clipped to 0.8, loss +0.8, no gradient
    (-0.5, -1.0, 0.8, 0.0, 1, 0),
    # same ratio, A > 0: unclipped -0.60653
    (-0.5, 1.0, -0.60653, -0.60653, 0, 0),
])
def test_dapo_clipped_surrogate(log_ratio, adv, loss, grad, lower, upper):
    new, inputs = _one_token(log_ratio, adv)
    out = compute_policy_loss("dapo", inputs, PARAMS)
    out.loss.backward()
    assert out.loss.item() == pytest.approx(loss, abs=1e-5)
    assert new.grad.item() == pytest.approx(grad, abs=1e-5)
    assert (out.sums["clipped_lower_count"], out.sums["clipped_upper_count"]) == (lower, upper)


def test_dapo_clip_higher_is_asymmetric():
    # ratio 1.25 with A > 0: clip_higher 0.28 leaves it alone, so loss is -1.25.
    _, inputs = _one_token(math.log(1.25), 1.0)
    params = LossParams(0.2, 0.28, 0.0, 2, 1.0)
    assert compute_policy_loss("dapo", inputs, params).loss.item() == pytest.approx(-1.25)


def test_cispo_detached_clipped_weight_times_logprob():
    # ratio e^0.5 = 1.64872 clipped to 1.2; new logprob -0.5 (old -1.0), A = 1:
    # loss = -1.2 * 1 * (-0.5) = 0.6 and d loss / d logp = -w A = -1.2
    new, inputs = _one_token(0.5, 1.0)
    out = compute_policy_loss("cispo", inputs, PARAMS)
    out.loss.backward()
    assert out.loss.item() == pytest.approx(0.6, abs=1e-6)
    assert new.grad.item() == pytest.approx(-1.2, abs=1e-6)
    assert out.sums["clipped_upper_count"] == 1


def test_cispo_has_no_lower_clip():
    # ratio 0.5 < 1 - clip_lower keeps its weight 0.5: gradient -0.5 * A
    new, inputs = _one_token(math.log(0.5), 2.0)
    out = compute_policy_loss("cispo", inputs, PARAMS)
    out.loss.backward()
    assert new.grad.item() == pytest.approx(-1.0, abs=1e-6)


def _batch(seed=0, rows=4, length=6):
    gen = torch.Generator().manual_seed(seed)
    old = -torch.rand(rows, length, generator=gen) * 3
    new = (old + torch.randn(rows, length, generator=gen) * 0.3).requires_grad_(True)
    ref = old + torch.randn(rows, length, generator=gen) * 0.1
    adv = torch.randn(rows, 1, generator=gen).expand(rows, length).contiguous()
    mask = torch.rand(rows, length, generator=gen) > 0.3
    mask[:, 0] = False
    return new, old, ref, adv, mask


def test_token_normalisation_vs_constant_denominator():
    # Two tokens with ratio 1 and A = 1 and 3: summed loss -(1 + 3) = -4.
    new = torch.tensor([[-1.0, -2.0, 0.0]], requires_grad=True)
    inputs = LossInputs(new, new.detach().clone(), torch.tensor([[1.0, 3.0, 9.0]]),
                        torch.tensor([[True, True, False]]))
    by_tokens = compute_policy_loss("dapo", inputs, LossParams(0.2, 0.2, 0.0, 2, denominator=2.0))
    by_constant = compute_policy_loss("dapo", inputs, LossParams(0.2, 0.2, 0.0, 2, 10.0))
    assert by_tokens.loss.item() == pytest.approx(-2.0)  # -4 / 2 response tokens
    assert by_constant.loss.item() == pytest.approx(-0.4)  # Dr.GRPO: -4 / 10


def test_kl_term_enters_the_loss_with_beta():
    # ratio 1, A = 0: the loss is beta * k1 with d = 0.5: 0.1 * 0.125
    new = torch.tensor([[-1.0]], requires_grad=True)
    inputs = LossInputs(new, new.detach().clone(), torch.tensor([[0.0]]), torch.tensor([[True]]),
                        ref_logprobs_RL=torch.tensor([[-1.5]]))
    out = compute_policy_loss("dapo", inputs, LossParams(0.2, 0.2, 0.1, 1, 1.0))
    assert out.loss.item() == pytest.approx(0.0125)
    metrics = summarize_loss_metrics(out.sums)
    assert metrics["objective/kl1_avg"] == pytest.approx(0.125)
    assert metrics["loss/kl_avg"] == pytest.approx(0.0125)


def test_beta_without_reference_is_an_error():
    _, inputs = _one_token(0.0, 1.0)
    with pytest.raises(ValueError, match="reference"):
        compute_policy_loss("dapo", inputs, LossParams(0.2, 0.2, 0.1, 2, 1.0))


@pytest.mark.parametrize("loss_fn", ["dapo", "cispo", "grpo", "gspo"])
def test_split_rows_sum_to_the_whole_batch_loss_and_gradient(loss_fn):
    new, old, ref, adv, mask = _batch()
    ids = torch.tensor([[0, 0, 0, 1, 1, 1], [2] * 6, [3, 3, 4, 4, 4, 4], [5] * 6])
    count = ids[mask].unique().numel() if normalization_unit(loss_fn) == "sequence" else mask.sum()
    params = LossParams(0.2, 0.28, 0.05, 2, denominator=float(count))
    whole = compute_policy_loss(loss_fn, LossInputs(new, old, adv, mask, ref, ids), params)
    (grad_whole,) = torch.autograd.grad(whole.loss, new)
    parts, grads = 0.0, torch.zeros_like(new)
    for rows in ([0, 1], [2, 3]):
        leaf = new.detach()[rows].requires_grad_(True)
        part = compute_policy_loss(loss_fn, LossInputs(leaf, old[rows], adv[rows], mask[rows],
                                                       ref[rows], ids[rows]), params)
        part.loss.backward()
        parts += part.loss.item()
        grads[rows] = leaf.grad
    assert parts == pytest.approx(whole.loss.item(), abs=1e-6)
    torch.testing.assert_close(grads, grad_whole)


def test_masked_positions_never_leak():
    new, old, ref, adv, mask = _batch(seed=1)
    params = LossParams(0.2, 0.2, 0.1, 3, denominator=float(mask.sum()))
    clean = compute_policy_loss("dapo", LossInputs(new, old, adv, mask, ref), params)
    (grad_clean,) = torch.autograd.grad(clean.loss, new)
    garbage = new.detach().clone()
    garbage[~mask] = float("inf")
    garbage.requires_grad_(True)
    dirty = compute_policy_loss("dapo", LossInputs(garbage, old, adv, mask, ref), params)
    (grad_dirty,) = torch.autograd.grad(dirty.loss, garbage)
    assert dirty.loss.item() == pytest.approx(clean.loss.item())
    assert torch.isfinite(grad_dirty).all() and torch.equal(grad_dirty[~mask],
                                                            torch.zeros_like(grad_dirty[~mask]))
    torch.testing.assert_close(grad_dirty, grad_clean)


def test_ratio_statistics_are_token_weighted():
    # ratios 1 and e^0.2 = 1.22140 (clipped above 1.2 for A > 0): mean 1.11070, var 0.01234
    new = torch.tensor([[0.0, -1.0, -0.8]], requires_grad=True)
    old = torch.tensor([[0.0, -1.0, -1.0]])
    out = compute_policy_loss("dapo", LossInputs(new, old, torch.ones(1, 3),
                                                 torch.tensor([[False, True, True]])), PARAMS)
    m = summarize_loss_metrics(out.sums)
    assert m["val/ratio"] == pytest.approx(1.11070, abs=1e-5)
    assert m["val/ratio_var"] == pytest.approx(0.11070 ** 2, abs=1e-5)
    assert m["policy/clipfrac_avg"] == pytest.approx(0.5)


def _two_sequences(log_ratios, advantages, ids):
    old = torch.full((1, len(ids)), -1.0)
    new = (old + torch.tensor([log_ratios])).requires_grad_(True)
    return new, LossInputs(new, old, torch.tensor([advantages]), torch.ones(1, len(ids),
                                                                            dtype=torch.bool),
                           sequence_ids_RL=torch.tensor([ids]))


def test_grpo_averages_tokens_then_sequences():
    # Sequence 0: two tokens, ratio 1, A = 1: token losses -1, -1, sequence mean -1.
    # Sequence 1: one token, ratio 1, A = -2: loss 2. Mean over 2 sequences: 0.5.
    new, inputs = _two_sequences([0.0, 0.0, 0.0], [1.0, 1.0, -2.0], [0, 0, 1])
    out = compute_policy_loss("grpo", inputs, LossParams(0.2, 0.2, 0.0, 2, denominator=2.0))
    out.loss.backward()
    assert out.loss.item() == pytest.approx(0.5)
    # d/dlogp of -A r w / 2 at r = 1: -1 * 1/2 / 2 = -0.25 for sequence 0, 2 * 1 / 2 = 1.0 for 1
    torch.testing.assert_close(new.grad, torch.tensor([[-0.25, -0.25, 1.0]]))


def test_gspo_uses_the_geometric_mean_ratio_per_sequence():
    # Log ratios 0.05 and 0.15: mean 0.1, s = e^0.1 = 1.10517 inside [0.8, 1.2], A = 1.
    # Loss -s = -1.10517; each token's gradient -A s / |o| = -0.55259.
    new, inputs = _two_sequences([0.05, 0.15], [1.0, 1.0], [4, 4])
    out = compute_policy_loss("gspo", inputs, LossParams(0.2, 0.2, 0.0, 2, denominator=1.0))
    out.loss.backward()
    assert out.loss.item() == pytest.approx(-1.10517, abs=1e-5)
    torch.testing.assert_close(new.grad, torch.full((1, 2), -0.55259), atol=1e-5, rtol=0)


def test_gspo_clips_the_whole_sequence():
    # Log ratios 0.2 and 0.4: s = e^0.3 = 1.34986 > 1.2 with A = 1: loss -1.2, no gradient,
    # and both tokens count as clipped even though the first token's own ratio is 1.22.
    new, inputs = _two_sequences([0.2, 0.4], [1.0, 1.0], [0, 0])
    out = compute_policy_loss("gspo", inputs, LossParams(0.2, 0.2, 0.0, 2, denominator=1.0))
    out.loss.backward()
    assert out.loss.item() == pytest.approx(-1.2)
    assert torch.equal(new.grad, torch.zeros(1, 2)) and out.sums["clipped_upper_count"] == 2


def test_sequence_losses_need_sequence_ids():
    _, inputs = _one_token(0.0, 1.0)
    with pytest.raises(ValueError, match="sequence_ids"):
        compute_policy_loss("grpo", inputs, PARAMS)
