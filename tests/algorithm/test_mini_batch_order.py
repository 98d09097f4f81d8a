"""Mini-batches are cut from permuted packed rows (seeded), so optimizer steps do not see the
batch sorted by length (`rlvr.algorithm.mini_batches`)."""

import torch

from rlvr.algorithm.mini_batches import split_mini_batches
from rlvr.algorithm.packing import SequenceToPack, pack_sequences


def _length_sorted_batch():
    """32 responses whose advantage falls with their length (long = wrong), packed by
    first_fit_decreasing: rows come out longest first."""
    lengths = [8 + (i * 7) % 57 for i in range(32)]
    seqs = [SequenceToPack([100 + i], [5] * n, [0.0] * n, advantage=1.0 if n < 36 else -1.0, index=i)
            for i, n in enumerate(lengths)]
    return pack_sequences(seqs, pack_length=72, strategy="first_fit_decreasing")


def _mean_advantages(parts):
    return [float(p.advantages_RL[p.response_mask_RL].mean()) for p in parts]


def test_first_fit_decreasing_mini_batches_are_permuted_not_sorted_by_length():
    """Cut in packing order, the first of 4 mini-batches held only the long (negative) responses
    and the last the short (positive) ones: each optimizer step saw one end of the length range.
    open-instruct permutes each rank's packed rows before collating them
    (`prepare_collated_data_for_workers`, `np.random.permutation`); rlvr now permutes the rows
    with a seed the trainer derives from the run's seed and the step."""
    batch = _length_sorted_batch()
    in_order = _mean_advantages(split_mini_batches(batch, 4))
    assert in_order[0] < 0 < in_order[-1]  # the length-sorted cut this guards against
    parts = split_mini_batches(batch, 4, seed=1234)
    # Every row is trained once, none twice; the same seed cuts the same mini-batches.
    assert sum(p.num_sequences for p in parts) == 32
    assert sum(p.num_response_tokens for p in parts) == batch.num_response_tokens
    again = split_mini_batches(batch, 4, seed=1234)
    assert all(torch.equal(a.input_ids_RL, b.input_ids_RL) for a, b in zip(parts, again))
    # Over seeds, the first mini-batch is not always the long end of the batch.
    firsts = [_mean_advantages(split_mini_batches(batch, 4, seed=s))[0] for s in range(8)]
    assert max(firsts) > in_order[0] and len(set(firsts)) > 1


def test_the_trainer_permutes_by_step_and_reproducibly():
    from rlvr.config import load_config
    from rlvr.run.loop import training_mini_batches

    cfg = load_config("configs/tiny.yaml", ["algorithm.num_mini_batches=4",
                                            "algorithm.gradient_accumulation_steps=1"])
    batch = _length_sorted_batch()

    def first_rows(step):
        return training_mini_batches(cfg, batch, step)[0].batch.input_ids_RL

    assert torch.equal(first_rows(3), first_rows(3))  # a resumed run cuts the same
    assert not all(torch.equal(first_rows(1), first_rows(s)) for s in range(2, 6))
