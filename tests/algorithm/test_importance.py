"""Engine-mismatch correction: truncated and masked importance sampling, by hand."""

import math

import pytest
import torch

from rlvr.algorithm.importance import RhoCorrection, rho_correction
from rlvr.algorithm.losses import LossInputs, LossParams, compute_policy_loss, summarize_loss_metrics

# Three response tokens of sequence 0 and one of sequence 1 (position 0 is a prompt token).
# old - engine = [_, 0.1, 1.0, -0.2 | 0.0]: rho = [_, 1.10517, 2.71828, 0.81873 | 1.0]
OLD = torch.tensor([[0.0, -1.0, -1.0, -1.0, -2.0]])
ENGINE = torch.tensor([[0.0, -1.1, -2.0, -0.8, -2.0]])
MASK = torch.tensor([[False, True, True, True, True]])
IDS = torch.tensor([[0, 0, 0, 0, 1]])


def test_truncated_weights_clamp_rho():
    r = rho_correction(OLD, ENGINE, MASK, IDS, RhoCorrection(0.5, 2.0))
    torch.testing.assert_close(r.weight_RL, torch.tensor([[1.0, 1.10517, 2.0, 0.81873, 1.0]]),
                               atol=1e-5, rtol=0)
    assert torch.equal(r.keep_RL, MASK)


def test_token_mask_drops_tokens_out_of_bounds():
    r = rho_correction(OLD, ENGINE, MASK, IDS, RhoCorrection(0.9, 2.0, "token"))
    # 2.71828 > 2 and 0.81873 < 0.9 are dropped
    assert r.keep_RL.tolist() == [[False, True, False, False, True]]


def test_sequence_mask_judges_the_geometric_mean_not_one_token():
    # Sequence 0's log rho: 0.1, 1.0, -0.2; mean 0.3, so its rho is e^0.3 = 1.34986, inside
    # [0.5, 2] although one token's rho (2.71828) is not: the sequence stays, every token
    # weighted by 1.34986. Sequence 1: rho 1.
    r = rho_correction(OLD, ENGINE, MASK, IDS, RhoCorrection(0.5, 2.0, "sequence"))
    assert r.keep_RL.tolist() == [[False, True, True, True, True]]
    torch.testing.assert_close(r.weight_RL, torch.tensor([[1.0, 1.34986, 1.34986, 1.34986, 1.0]]),
                               atol=1e-5, rtol=0)


def test_sequence_mask_drops_a_sequence_whose_mean_drifts():
    # Upper bound 1.3 < 1.34986: sequence 0 goes whole; sequence 1 (rho 1) stays.
    r = rho_correction(OLD, ENGINE, MASK, IDS, RhoCorrection(0.5, 1.3, "sequence"))
    assert r.keep_RL.tolist() == [[False, False, False, False, True]]


def test_sequence_token_masks_by_the_geometric_mean_and_weights_by_each_tokens_rho():
    # Sequence 0's geometric-mean rho is 1.34986, inside [0.5, 2]: kept, as with `sequence`, but
    # each token weighted by its own rho clamped to [0.5, 2]: 1.10517, 2 (not e), 0.81873.
    r = rho_correction(OLD, ENGINE, MASK, IDS, RhoCorrection(0.5, 2.0, "sequence_token"))
    assert r.keep_RL.tolist() == [[False, True, True, True, True]]
    torch.testing.assert_close(r.weight_RL, torch.tensor([[1.0, 1.10517, 2.0, 0.81873, 1.0]]),
                               atol=1e-5, rtol=0)
    # Upper bound 1.3 < 1.34986: sequence 0 goes whole although two of its tokens are inside.
    r = rho_correction(OLD, ENGINE, MASK, IDS, RhoCorrection(0.5, 1.3, "sequence_token"))
    assert r.keep_RL.tolist() == [[False, False, False, False, True]]


def test_sequence_modes_on_open_instructs_own_case():
    # open-instruct's test_rho_mask_sequence_level (mask bounds [0.5, 2]): token rhos
    # [0.25, 1, 4] (geometric mean 1, kept), [4, 4, 4] (4, dropped), [0.25, 0.25, 0.25]
    # (0.25, dropped). open-instruct weights row 0 by the sequence's rho, [1, 1, 1]: `sequence`.
    # `sequence_token` keeps the same rows and weights by each token's clamped rho:
    # [0.5, 1, 2].
    old = torch.log(torch.tensor([[0.25, 1.0, 4.0], [4.0, 4.0, 4.0], [0.25, 0.25, 0.25]]))
    engine = torch.zeros_like(old)
    mask = torch.ones_like(old, dtype=torch.bool)
    ids = torch.tensor([[0, 0, 0], [1, 1, 1], [2, 2, 2]])
    kept = [[True] * 3, [False] * 3, [False] * 3]
    seq = rho_correction(old, engine, mask, ids, RhoCorrection(0.5, 2.0, "sequence"))
    assert seq.keep_RL.tolist() == kept
    torch.testing.assert_close(seq.weight_RL[0], torch.tensor([1.0, 1.0, 1.0]))
    tok = rho_correction(old, engine, mask, ids, RhoCorrection(0.5, 2.0, "sequence_token"))
    assert tok.keep_RL.tolist() == kept
    torch.testing.assert_close(tok.weight_RL[0], torch.tensor([0.5, 1.0, 2.0]))


@pytest.mark.parametrize("mode, loss", [
    # Ratio 1, A = 1, bounds [0.5, 2], 4 response tokens; every token kept in both modes.
    ("sequence", -(3 * 1.34986 + 1.0) / 4),  # every token of sequence 0 weighted by 1.34986
    ("sequence_token", -(1.10517 + 2.0 + 0.81873 + 1.0) / 4),  # each by its clamped rho
])
def test_the_two_sequence_modes_give_different_losses(mode, loss):
    new = OLD.clone().requires_grad_(True)
    params = LossParams(0.2, 0.2, 0.0, 2, denominator=4.0, rho=RhoCorrection(0.5, 2.0, mode))
    out = compute_policy_loss("dapo", LossInputs(new, OLD, torch.ones(1, 5), MASK,
                                                 sequence_ids_RL=IDS, engine_logprobs_RL=ENGINE),
                              params)
    assert out.loss.item() == pytest.approx(loss, abs=1e-4)


def test_an_unknown_mode_is_refused_naming_the_known_ones():
    with pytest.raises(ValueError, match="sequence_token"):
        rho_correction(OLD, ENGINE, MASK, IDS, RhoCorrection(0.5, 2.0, "sequences"))


def test_masked_tokens_keep_their_kl_term_and_metrics_count_kept_tokens():
    # Token mask [0.9, 2]: tokens 2 (rho e) and 3 (rho 0.81873) lose their policy term. With
    # new = old, A = 0, beta 0.1, k1 and ref = new - 0.5 the KL term is 0.1 * 0.125 on each of the
    # 4 response tokens, dropped or not (open-instruct keeps it): loss 0.05 / 4.
    new = OLD.clone().requires_grad_(True)
    params = LossParams(0.2, 0.2, 0.1, 1, denominator=4.0, rho=RhoCorrection(0.9, 2.0, "token"))
    out = compute_policy_loss("dapo", LossInputs(new, OLD, torch.zeros(1, 5), MASK,
                                                 ref_logprobs_RL=OLD - 0.5, sequence_ids_RL=IDS,
                                                 engine_logprobs_RL=ENGINE), params)
    assert out.loss.item() == pytest.approx(0.05 / 4, abs=1e-6)
    m = summarize_loss_metrics(out.sums)
    # Ratio 1 on the 2 kept tokens: their mean is 1, not 2 / 4 (the dilution this fixes).
    assert m["val/ratio"] == pytest.approx(1.0)
    assert m["val/rho_masked_frac"] == pytest.approx(0.5)
    assert m["objective/kl1_avg"] == pytest.approx(0.125)


def test_rho_reweights_the_policy_gradient_term():
    # Ratio 1 (new = old), A = 1 on every token: token loss -1 * clamp(rho); with bounds
    # [0.5, 2]: -(1.10517 + 2 + 0.81873 + 1) = -4.9239, over 4 tokens -1.23098.
    new = OLD.clone().requires_grad_(True)
    params = LossParams(0.2, 0.2, 0.0, 2, denominator=4.0, rho=RhoCorrection(0.5, 2.0))
    out = compute_policy_loss("dapo", LossInputs(new, OLD, torch.ones(1, 5), MASK,
                                                 sequence_ids_RL=IDS, engine_logprobs_RL=ENGINE),
                              params)
    assert out.loss.item() == pytest.approx(-4.9239 / 4, abs=1e-4)
    m = summarize_loss_metrics(out.sums)
    assert m["val/rho_max"] == pytest.approx(math.e, abs=1e-5)
    assert m["val/rho_min"] == pytest.approx(0.81873, abs=1e-5)
    assert m["val/rho_masked_frac"] == 0.0


def test_rho_needs_engine_logprobs():
    new = OLD.clone().requires_grad_(True)
    with pytest.raises(ValueError, match="engine"):
        compute_policy_loss("dapo", LossInputs(new, OLD, torch.ones(1, 5), MASK),
                            LossParams(0.2, 0.2, 0.0, 2, 4.0, rho=RhoCorrection(0.5, 2.0)))


def test_sequence_truncate_is_open_instructs_sequence_level_with_its_mask_bounds_off():
    """open-instruct's `grpo_utils.compute_rho_correction` with `rho_mask_sequence_level` and
    its mask bounds at their default (off): the sequence's geometric-mean rho is clamped to the
    clamp bounds and weights every token; no sequence is dropped. Token rhos all 3, bounds
    [0, 2]: `sequence` drops the sequence, open-instruct (and `sequence_truncate`) weight it 2."""
    old = torch.log(torch.tensor([[3.0, 3.0, 3.0], [0.25, 1.0, 4.0]]))
    engine = torch.zeros_like(old)
    mask = torch.ones_like(old, dtype=torch.bool)
    ids = torch.tensor([[0, 0, 0], [1, 1, 1]])
    dropped = rho_correction(old, engine, mask, ids, RhoCorrection(0.0, 2.0, "sequence"))
    assert dropped.keep_RL[0].tolist() == [False] * 3
    kept = rho_correction(old, engine, mask, ids, RhoCorrection(0.0, 2.0, "sequence_truncate"))
    assert kept.keep_RL.tolist() == [[True] * 3, [True] * 3]
    torch.testing.assert_close(kept.weight_RL, torch.tensor([[2.0] * 3, [1.0] * 3]))


def test_log_rho_is_clamped_at_10_before_the_sequence_mean_as_open_instruct():
    """open-instruct clamps each token's log rho to [-10, 10] (`compute_rho_correction`) before
    the sequence mean; rlvr clamped at 40. One outlier token, log rho 30, among 20 tokens of log
    rho 0: the mean was 30/20 = 1.5 (rho 4.48, out of [0, 2]: the sequence dropped); clamped at
    10 it is 0.5, rho e^0.5 = 1.6487, and the sequence is kept at that weight."""
    old = torch.zeros(1, 20)
    old[0, 7] = 30.0
    engine = torch.zeros_like(old)
    mask = torch.ones_like(old, dtype=torch.bool)
    ids = torch.zeros(1, 20, dtype=torch.long)
    for mode in ("sequence", "sequence_truncate", "sequence_token"):
        r = rho_correction(old, engine, mask, ids, RhoCorrection(0.0, 2.0, mode))
        assert r.keep_RL.all(), mode
    seq = rho_correction(old, engine, mask, ids, RhoCorrection(0.0, 2.0, "sequence"))
    torch.testing.assert_close(seq.weight_RL, torch.full((1, 20), math.exp(0.5)))


def test_policy_avg_logs_the_rho_weighted_term_that_was_optimised():
    """`loss/policy_avg` summed the policy term before the rho weight, so it was not the loss
    the step took the gradient of. Ratio 1, A = 1, bounds [0.5, 2]: the optimised token terms
    are -(1.10517 + 2 + 0.81873 + 1) over 4 kept tokens = -1.23098 (unweighted it read -1), and
    with beta 0 the optimised loss over its 4-token denominator is the same number."""
    new = OLD.clone().requires_grad_(True)
    params = LossParams(0.2, 0.2, 0.0, 2, denominator=4.0, rho=RhoCorrection(0.5, 2.0))
    out = compute_policy_loss("dapo", LossInputs(new, OLD, torch.ones(1, 5), MASK,
                                                 sequence_ids_RL=IDS, engine_logprobs_RL=ENGINE),
                              params)
    m = summarize_loss_metrics(out.sums)
    assert m["loss/policy_avg"] == pytest.approx(-4.9239 / 4, abs=1e-4)
    assert m["loss/policy_avg"] == pytest.approx(out.loss.item(), abs=1e-6)
