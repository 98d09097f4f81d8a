"""Splitting a packed batch across ranks: balance worked out by hand, equal micro-batch counts,
and dummy rows that add exactly nothing to the loss or the gradient."""

import pytest
import torch

from rlvr.algorithm.losses import LossInputs, LossParams, compute_policy_loss
from rlvr.algorithm.packing import SequenceToPack, pack_sequences
from rlvr.distributed.balance import (assign_rows_to_ranks, micro_batches_per_rank,
                                      split_batch_for_ranks)
from rlvr.learner.forward import forward_logprobs


def _batch(lengths: list[tuple[int, int]], pack_length: int = 16):
    """One sequence per (prompt, response) length pair, packed in order (a sequence joins the
    previous row if it fits); advantages alternate in sign."""
    seqs = [SequenceToPack(list(range(3, 3 + p)), list(range(40, 40 + r)), [-1.0] * r,
                           advantage=(-1.0) ** i, index=i)
            for i, (p, r) in enumerate(lengths)]
    return pack_sequences(seqs, pack_length=pack_length, share_prompts=False)


TWELVE_SEVEN_SEVEN = [(8, 4), (4, 3), (4, 3)]  # at pack_length 12: three rows


def test_largest_first_onto_the_lightest_rank():
    # 50 -> r0; 40 -> r1; 30 -> r1 (40 < 50); 20 -> r0 (50 < 70); 10: loads 70 / 70 and
    # rows 2 / 2, so the lower rank, r0.
    assert assign_rows_to_ranks([10, 50, 20, 30, 40], 2) == [[0, 1, 2], [3, 4]]
    assert assign_rows_to_ranks([5, 5], 3) == [[0], [1], []]
    assert assign_rows_to_ranks([], 2) == [[], []]


@pytest.mark.parametrize("micro, ranks, fullest, expected", [
    (1, 2, 5, 1), (2, 2, 5, 1), (3, 2, 5, 2), (4, 2, 5, 2), (8, 2, 2, 2), (4, 4, 0, 1)])
def test_micro_batches_are_each_ranks_share_of_the_batch(micro, ranks, fullest, expected):
    assert micro_batches_per_rank(micro, ranks, fullest) == expected


def test_split_is_a_balanced_partition_with_equal_micro_batch_counts():
    # No two of these fit in one 12-token row: one sequence per row.
    batch = _batch([(8, 4), (8, 3), (6, 4), (6, 3), (5, 3), (4, 3)], pack_length=12)
    assert [sum(r) for r in batch.seq_lens_per_row] == [12, 11, 10, 9, 8, 7]
    split = split_batch_for_ranks(batch, num_ranks=2, num_micro_batches=4)
    # 12 -> r0, 11 -> r1, 10 -> r1 (21), 9 -> r0 (21), 8 -> r0 (tie: lower rank), 7 -> r1:
    # 29 and 28 tokens.
    assert split.row_indices == [[0, 3, 4], [1, 2, 5]]
    assert split.num_micro_batches == 2
    assert all(p.num_rows >= split.num_micro_batches for p in split.parts)
    assert sum(p.num_response_tokens for p in split.parts) == batch.num_response_tokens
    assert sum(p.num_tokens for p in split.parts) == batch.num_tokens
    assert sum(p.num_sequences for p in split.parts) == batch.num_sequences


def test_parts_are_trimmed_to_their_longest_row():
    batch = _batch([(8, 4), (1, 1), (1, 1), (1, 1)], pack_length=12)
    assert batch.seq_lens_per_row == [[12], [2, 2, 2]]
    split = split_batch_for_ranks(batch, num_ranks=2, num_micro_batches=1)
    assert split.row_indices == [[0], [1]]
    assert split.parts[0].input_ids_RL.shape == (1, 12)
    # Rank 1's row holds 6 tokens: 6 columns, not the batch's 12; what is cut is padding.
    short = split.parts[1]
    assert short.input_ids_RL.shape == (1, 6)
    torch.testing.assert_close(short.input_ids_RL, batch.input_ids_RL[1:, :6])
    assert (batch.segment_ids_RL[1, 6:] == -1).all()


def test_fewer_rows_than_ranks_gives_dummy_rows():
    batch = _batch([(3, 2)])
    split = split_batch_for_ranks(batch, num_ranks=3, num_micro_batches=2)
    assert split.num_micro_batches == 1 and split.row_indices == [[0], [], []]
    for dummy in split.parts[1:]:
        assert dummy.num_rows == 1 and dummy.input_ids_RL.shape == (1, 1)
        assert not dummy.response_mask_RL.any()
        assert dummy.num_tokens == 0 and dummy.num_sequences == 0
        assert dummy.input_ids_RL.dtype == torch.long and dummy.advantages_RL.dtype == torch.float32


def test_a_rank_with_fewer_rows_than_micro_batches_is_topped_up():
    # Rows of 12, 7 and 7 tokens: rank 0 takes the 12, rank 1 both 7s.
    batch = _batch(TWELVE_SEVEN_SEVEN, pack_length=12)
    split = split_batch_for_ranks(batch, num_ranks=2, num_micro_batches=4)
    assert split.row_indices == [[0], [1, 2]] and split.num_micro_batches == 2
    padded = split.parts[0]
    assert padded.num_rows == 2 and padded.seq_lens_per_row == [[12], []]
    assert not padded.response_mask_RL[1].any()
    assert (padded.sequence_index_RL[1] == -1).all()


def test_dummy_rows_add_no_loss_and_no_gradient(tiny_model):
    batch = _batch(TWELVE_SEVEN_SEVEN, pack_length=12)
    plain = batch.select_rows([0])
    with_dummy = split_batch_for_ranks(batch, num_ranks=2, num_micro_batches=4).parts[0]
    assert with_dummy.num_rows == 2 and not with_dummy.response_mask_RL[1].any()
    params = LossParams(clip_lower=0.2, clip_higher=0.28, beta=0.0, kl_estimator=2,
                        denominator=7.0)

    def loss_and_grads(part):
        tiny_model.zero_grad()
        new_RL, _ = forward_logprobs(tiny_model, part, temperature=1.0)
        loss = compute_policy_loss("grpo", LossInputs(
            new_logprobs_RL=new_RL, old_logprobs_RL=new_RL.detach() + 0.1,
            advantages_RL=part.advantages_RL, response_mask_RL=part.response_mask_RL,
            sequence_ids_RL=part.sequence_index_RL), params).loss
        loss.backward()
        return loss.detach(), [p.grad.clone() for p in tiny_model.parameters()]

    loss_plain, grads_plain = loss_and_grads(plain)
    loss_dummy, grads_dummy = loss_and_grads(with_dummy)
    torch.testing.assert_close(loss_dummy, loss_plain, atol=1e-7, rtol=1e-6)
    for a, b in zip(grads_dummy, grads_plain):
        torch.testing.assert_close(a, b, atol=1e-7, rtol=1e-5)
    loss_only_dummy, grads_only_dummy = loss_and_grads(
        split_batch_for_ranks(batch.select_rows([0]), 2, 1).parts[1])
    assert loss_only_dummy.item() == 0.0
    assert all(not g.any() for g in grads_only_dummy)


def test_a_token_budget_gives_every_rank_the_same_micro_batch_count():
    from rlvr.algorithm.packing import SequenceToPack, micro_batch_cost, pack_sequences
    from rlvr.algorithm.packing import plan_micro_batches
    from rlvr.distributed.balance import split_batch_for_ranks

    seqs = [SequenceToPack([1, 2, 3], [4] * (3 + i % 9), [-1.0] * (3 + i % 9), 1.0, i)
            for i in range(14)]
    batch = pack_sequences(seqs, pack_length=32)
    split = split_batch_for_ranks(batch, 2, 1, max_tokens_per_micro_batch=40)
    assert split.num_micro_batches > 1
    for part in split.parts:
        rows = [sum(lens) for lens in part.seq_lens_per_row]
        cut = plan_micro_batches(rows, split.num_micro_batches, 40)
        assert len(cut) == split.num_micro_batches  # exactly the count every rank runs
        assert all(micro_batch_cost([rows[r] for r in p]) <= 40 for p in cut)
