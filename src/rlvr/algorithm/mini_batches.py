"""Cut a training batch into mini-batches, one optimizer step each (open-instruct's
`num_mini_batches`), and give each the denominator of its own loss.

open-instruct (`grpo_fast.py`, `PolicyTrainerRayProcess.step`) cuts each rank's packed
micro-batches into `num_mini_batches` contiguous groups of equal size, takes one optimizer step
per group, and divides each group's summed token losses by that group's response-token count
over all ranks (`calculate_token_counts`), or by the constant `loss_denominator`. Its LR
schedule counts `num_training_steps x num_epochs x num_mini_batches` steps. The same here, with
two differences that only show when the rows do not divide evenly: the cut is over the whole
batch's packed rows (before they are spread over ranks, so the denominator is a plain count,
no all-reduce), and no row is dropped (open-instruct drops the rows left over when its
micro-batches do not divide by the group size: here the first parts hold one row more).

The rows are permuted before the cut (seeded: the trainer derives the seed from the run's seed
and the step, so a resumed run cuts the same), as open-instruct permutes each rank's packed rows
(`prepare_collated_data_for_workers`). Cut in packing order, `first_fit_decreasing` rows come
out longest first, so the first optimizer steps saw only the long responses and the last only
the short ones: with length correlated with advantage, mini-batches of mean advantage
-0.77/-1.0/-0.83/+0.84.

A pure function of a batch and a number: no process group, model or config.
"""

from __future__ import annotations

import torch

from rlvr.algorithm.packing import split_rows
from rlvr.types import PackedBatch


def split_mini_batches(batch: PackedBatch, num_mini_batches: int,
                       seed: int | None = None) -> list[PackedBatch]:
    """`batch`'s rows, permuted with `seed` (None: in packing order), in `num_mini_batches`
    as-even-as-possible parts, each trimmed of the padding columns past its longest row. Fewer
    parts when the batch has fewer rows (a row, which holds whole units of a prompt and its
    responses, never splits). One part is the batch itself, untouched."""
    if num_mini_batches < 1:
        raise ValueError(f"num_mini_batches={num_mini_batches} must be at least 1")
    if num_mini_batches == 1:
        return [batch]
    order = list(range(batch.num_rows))
    if seed is not None:
        generator = torch.Generator(device="cpu").manual_seed(seed)
        order = torch.randperm(batch.num_rows, generator=generator).tolist()
    return [batch.select_rows([order[i] for i in rows]).trimmed()
            for rows in split_rows(batch.num_rows, num_mini_batches) if rows]


def mini_batch_count(batch: PackedBatch, per: str) -> int:
    """What a mini-batch's loss denominator counts: its response tokens ("token"), or its
    sequences ("sequence", for losses averaged per sequence)."""
    if per not in ("token", "sequence"):
        raise ValueError(f"per={per!r} is not 'token' or 'sequence'")
    return batch.num_sequences if per == "sequence" else batch.num_response_tokens
