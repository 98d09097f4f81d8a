"""Packing layout on a small example worked out by hand."""

import pytest
import torch

from rlvr.algorithm.packing import SequenceToPack, pack_sequences, packed_ratio, split_rows

SEQS = [
    SequenceToPack([11, 12], [13, 14], [-0.1, -0.2], advantage=1.5, index=0),  # 4 tokens
    SequenceToPack([21], [22, 23], [-0.3, -0.4], advantage=-0.5, index=1),  # 3 tokens
    SequenceToPack([31, 32, 33], [34], [-0.5], advantage=2.0, index=2),  # 4 tokens
]


def test_greedy_in_order_layout():
    batch = pack_sequences(SEQS, pack_length=8, pad_id=0)
    # Row 0 takes sequences 0 and 1 (7 tokens); sequence 2 does not fit, so it opens row 1.
    assert batch.seq_lens_per_row == [[4, 3], [4]]
    assert batch.input_ids_RL.tolist() == [[11, 12, 13, 14, 21, 22, 23],
                                           [31, 32, 33, 34, 0, 0, 0]]
    assert batch.position_ids_RL.tolist() == [[0, 1, 2, 3, 0, 1, 2], [0, 1, 2, 3, 0, 0, 0]]
    assert batch.response_mask_RL.int().tolist() == [[0, 0, 1, 1, 0, 1, 1], [0, 0, 0, 1, 0, 0, 0]]
    assert batch.advantages_RL.tolist() == [[0, 0, 1.5, 1.5, 0, -0.5, -0.5], [0, 0, 0, 2.0, 0, 0, 0]]
    torch.testing.assert_close(batch.engine_logprobs_RL[0],
                               torch.tensor([0, 0, -0.1, -0.2, 0, -0.3, -0.4]))
    assert batch.sequence_index_RL.tolist() == [[0, 0, 0, 0, 1, 1, 1], [2, 2, 2, 2, -1, -1, -1]]
    assert batch.segment_ids_RL.tolist() == [[0, 0, 1, 1, 2, 3, 3], [0, 0, 0, 1, -1, -1, -1]]
    assert batch.parent_segment_RL.tolist() == [[-1, -1, 0, 0, -1, 2, 2],
                                                [-1, -1, -1, 0, -1, -1, -1]]
    # Response tokens are predicted from the position before them.
    assert batch.predictor_pos_RL.tolist() == [[-1, -1, 1, 2, -1, 4, 5], [-1, -1, -1, 2, -1, -1, -1]]
    assert batch.num_response_tokens == 5 and batch.num_sequences == 3


def test_samples_of_a_group_share_one_prompt():
    group = [SequenceToPack([7, 8, 9], [1, 2], [-0.1, -0.2], 1.0, 0),
             SequenceToPack([7, 8, 9], [3], [-0.3], -1.0, 1),
             SequenceToPack([7, 8, 9], [4, 5], [-0.4, -0.5], 0.5, 2)]
    batch = pack_sequences(group, pack_length=8)
    # The prompt once, then each response with positions continuing from the prompt; the third
    # response would overflow the unit (3 + 2 + 1 + 2 = 8 fits exactly).
    assert batch.input_ids_RL.tolist() == [[7, 8, 9, 1, 2, 3, 4, 5]]
    assert batch.position_ids_RL.tolist() == [[0, 1, 2, 3, 4, 3, 3, 4]]
    assert batch.segment_ids_RL.tolist() == [[0, 0, 0, 1, 1, 2, 3, 3]]
    assert batch.parent_segment_RL.tolist() == [[-1, -1, -1, 0, 0, 0, 0, 0]]
    # Every response's first token is predicted from the prompt's last position (2).
    assert batch.predictor_pos_RL.tolist() == [[-1, -1, -1, 2, 3, 2, 2, 6]]
    assert batch.advantages_RL.tolist() == [[0, 0, 0, 1.0, 1.0, -1.0, 0.5, 0.5]]
    unshared = pack_sequences(group, pack_length=8, share_prompts=False)
    assert unshared.seq_lens_per_row == [[5], [4], [5]]  # 5 + 4 > 8: a row each


def test_a_full_unit_starts_a_new_copy_of_the_prompt():
    group = [SequenceToPack([7, 8], [1, 2, 3], [0.0] * 3, 1.0, i) for i in range(3)]
    batch = pack_sequences(group, pack_length=8)
    assert batch.seq_lens_per_row == [[8], [5]]  # 2 + 3 + 3, then the prompt again + 3


def test_packed_ratio_counts_padding():
    batch = pack_sequences(SEQS, pack_length=8)
    assert packed_ratio(batch) == pytest.approx(11 / 14)  # 11 real tokens in 2 rows of 7


def test_a_sequence_longer_than_the_pack_is_an_error():
    with pytest.raises(ValueError, match="sequence 0 has 4 tokens"):
        pack_sequences(SEQS, pack_length=3)


def test_select_rows_keeps_whole_sequences():
    batch = pack_sequences(SEQS, pack_length=4)
    assert batch.num_rows == 3
    sub = batch.select_rows([1, 2])
    assert sub.seq_lens_per_row == [[3], [4]] and sub.num_response_tokens == 3


def test_split_rows_is_contiguous_and_even():
    assert split_rows(5, 2) == [[0, 1, 2], [3, 4]]
    assert split_rows(4, 4) == [[0], [1], [2], [3]]
    assert split_rows(1, 2) == [[0], []]


def test_first_fit_decreasing_uses_fewer_rows():
    from rlvr.algorithm.packing import assign_rows_first_fit_decreasing, assign_rows_in_order

    lengths = [5, 6, 3, 2, 4]  # pack 10
    assert assign_rows_in_order(lengths, 10) == [[0], [1, 2], [3, 4]]
    # 6 -> row 0; 5 -> row 1; 4 -> row 0 (6 + 4); 3 -> row 1 (5 + 3); 2 -> row 1 (8 + 2)
    assert assign_rows_first_fit_decreasing(lengths, 10) == [[1, 4], [0, 2, 3]]
    seqs = [SequenceToPack([1] * (n - 1), [2], [0.0], 0.0, i) for i, n in enumerate(lengths)]
    for strategy in ("in_order", "first_fit_decreasing"):
        batch = pack_sequences(seqs, 10, share_prompts=False, strategy=strategy)
        assert sorted(batch.sequence_index_RL[batch.response_mask_RL].tolist()) == [0, 1, 2, 3, 4]
    assert pack_sequences(seqs, 10, share_prompts=False,
                          strategy="first_fit_decreasing").num_rows == 2


def test_micro_batches_by_token_budget_stay_within_it_and_keep_row_order():
    from rlvr.algorithm.packing import micro_batch_cost, plan_micro_batches

    rows = [250, 240, 30, 30, 30, 200, 10]
    parts = plan_micro_batches(rows, 1, max_tokens=512)
    assert [r for p in parts for r in p] == list(range(len(rows)))
    assert all(micro_batch_cost([rows[r] for r in p]) <= 512 for p in parts)
    assert parts == [[0, 1], [2, 3, 4], [5, 6]]  # 2 x 250; 3 x 30; 4 x 200 would not fit
    # More parts asked than the budget needs: the fullest parts are halved, never merged.
    more = plan_micro_batches(rows, 5, max_tokens=512)
    assert len(more) == 5 and [r for p in more for r in p] == list(range(len(rows)))
    assert all(micro_batch_cost([rows[r] for r in p]) <= 512 for p in more)
    # A row over the budget is a micro-batch of its own (rows never split).
    assert plan_micro_batches([600, 10, 10], 1, max_tokens=512) == [[0], [1, 2]]
    # No budget: the even cut, as before.
    assert plan_micro_batches(rows, 2) == [[0, 1, 2, 3], [4, 5, 6]]
    # Dummy rows (no tokens) cost nothing; parts are padded with empties to the count asked.
    assert micro_batch_cost([0, 0, 100]) == 100
    assert plan_micro_batches([5], 3, max_tokens=64) == [[0], [], []]
