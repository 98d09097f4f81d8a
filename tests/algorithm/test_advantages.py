"""Group advantages and zero-std filtering against numbers worked out by hand."""

import pytest
import torch

from rlvr.algorithm.advantages import compute_group_advantages
from rlvr.algorithm.filtering import filter_zero_std_groups

# Group 0: mean 0.5, population std 0.5.
# Group 1: mean 0.75, population std sqrt((3 * 0.25^2 + 0.75^2) / 4) = sqrt(0.1875) = 0.43301.
REWARDS = torch.tensor([[1.0, 0.0, 0.0, 1.0], [1.0, 1.0, 1.0, 0.0]])


def test_standard_is_reward_minus_mean_over_population_std():
    adv = compute_group_advantages(REWARDS, "standard", eps=0.0)
    expected = torch.tensor([[1.0, -1.0, -1.0, 1.0],
                             [0.25 / 0.43301, 0.25 / 0.43301, 0.25 / 0.43301, -0.75 / 0.43301]])
    torch.testing.assert_close(adv, expected, atol=1e-4, rtol=0)  # 0.57735 and -1.73205


def test_centered_is_reward_minus_mean():
    adv = compute_group_advantages(REWARDS, "centered")
    torch.testing.assert_close(adv, torch.tensor([[0.5, -0.5, -0.5, 0.5],
                                                  [0.25, 0.25, 0.25, -0.75]]))


def test_eps_keeps_a_flat_group_at_zero():
    adv = compute_group_advantages(torch.tensor([[1.0, 1.0, 1.0]]), "standard")
    assert torch.equal(adv, torch.zeros(1, 3))


def test_unknown_normalization_names_the_choices():
    with pytest.raises(ValueError, match="centered"):
        compute_group_advantages(REWARDS, "whiten")


def test_zero_std_filter_counts_and_ratio():
    rewards = torch.tensor([[1.0, 0.0], [1.0, 1.0], [0.0, 0.0], [0.5, 0.0]])
    result = filter_zero_std_groups(rewards, enabled=True)
    assert result.keep_N.tolist() == [True, False, False, True]
    assert result.real_batch_size_ratio == 0.5  # 2 of 4 groups kept
    assert (result.num_zero_std_groups, result.num_solved_groups,
            result.num_unsolved_groups) == (2, 1, 1)


def test_disabled_filter_keeps_everything_but_still_counts():
    rewards = torch.tensor([[1.0, 1.0], [0.0, 1.0]])
    result = filter_zero_std_groups(rewards, enabled=False)
    assert result.keep_N.tolist() == [True, True] and result.real_batch_size_ratio == 1.0
    assert result.num_zero_std_groups == 1
