"""Polyak update by hand: ref <- (1 - alpha) ref + alpha policy."""

import pytest
import torch

from rlvr.algorithm.polyak import polyak_update_


def test_moves_the_reference_a_fraction_alpha_toward_the_policy():
    ref = [torch.tensor([0.0, 10.0]), torch.tensor([[4.0]])]
    policy = [torch.tensor([1.0, 0.0]), torch.tensor([[8.0]])]
    polyak_update_(ref, policy, alpha=0.25)
    # 0.75 * 0 + 0.25 * 1 = 0.25; 0.75 * 10 + 0 = 7.5; 0.75 * 4 + 0.25 * 8 = 5
    assert ref[0].tolist() == [0.25, 7.5] and ref[1].tolist() == [[5.0]]


def test_alpha_one_copies_and_zero_keeps():
    ref, policy = [torch.tensor([3.0])], [torch.tensor([5.0])]
    polyak_update_(ref, policy, 0.0)
    assert ref[0].item() == 3.0
    polyak_update_(ref, policy, 1.0)
    assert ref[0].item() == 5.0


def test_bad_alpha():
    with pytest.raises(ValueError):
        polyak_update_([torch.zeros(1)], [torch.zeros(1)], 1.5)
