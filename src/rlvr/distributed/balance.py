"""Split a packed batch across learner ranks: balanced token counts, equal micro-batch counts.

Rows are the unit (a row never splits: its units' logprobs need their prompt in the same row).
Each rank gets whole rows, heaviest first onto the lightest rank (greedy largest-first), so the
ranks' forward/backward work is about equal and nobody idles at the next collective.

Every rank must run the same number of forward and backward passes: with FSDP2 each pass
all-gathers and reduce-scatters, and a rank that skips one leaves its peers waiting until the
timeout. So a rank with too few rows (or none: fewer rows than ranks) is topped up with dummy
rows whose response mask is all False: they run through the model, take part in every
collective, and contribute exactly zero loss and zero gradient.

A pure function of the batch and two numbers: it knows no process group, model or loss. The
loss's denominator (the global token or sequence count) is the caller's business and is the
same number on every rank.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch

from rlvr.algorithm.packing import plan_micro_batches
from rlvr.device import HOST
from rlvr.types import PackedBatch

# What a dummy (or padding) position holds in each [R, L] field of a PackedBatch. Token id 0
# exists in every vocabulary; the -1s mark "no sequence / no chunk / not a response token".
_DUMMY_FILL = {
    "input_ids_RL": 0, "position_ids_RL": 0, "response_mask_RL": False, "advantages_RL": 0.0,
    "engine_logprobs_RL": 0.0, "sequence_index_RL": -1, "segment_ids_RL": -1,
    "parent_segment_RL": -1, "predictor_pos_RL": -1,
}


@dataclass
class RankSplit:
    """One step's batch, split for `len(parts)` ranks."""

    parts: list[PackedBatch]  # rank r's rows; every part has at least `num_micro_batches` rows
    num_micro_batches: int  # micro-batches EACH rank runs (equal across ranks)
    row_indices: list[list[int]]  # rank r's rows in the original batch (dummies not listed)


def assign_rows_to_ranks(row_tokens: list[int], num_ranks: int) -> list[list[int]]:
    """Greedy largest-first: rows by decreasing token count, each to the rank with the fewest
    tokens so far (ties: fewer rows, then lower rank). Within a rank, rows keep batch order."""
    if num_ranks < 1:
        raise ValueError(f"num_ranks={num_ranks} must be at least 1")
    ranks: list[list[int]] = [[] for _ in range(num_ranks)]
    load = [0] * num_ranks
    for row in sorted(range(len(row_tokens)), key=lambda i: (-row_tokens[i], i)):
        r = min(range(num_ranks), key=lambda k: (load[k], len(ranks[k]), k))
        ranks[r].append(row)
        load[r] += row_tokens[row]
    return [sorted(rows) for rows in ranks]


def micro_batches_per_rank(num_micro_batches: int, num_ranks: int, max_rows_on_a_rank: int) -> int:
    """`num_micro_batches` cuts the WHOLE batch (as on one process), so each rank runs its share,
    ceil(M / N): a forward pass holds about as many rows as it would on one process. Never more
    than the fullest rank's rows (more would only add dummy passes), never less than one."""
    if num_micro_batches < 1:
        raise ValueError(f"num_micro_batches={num_micro_batches} must be at least 1")
    return max(1, min(math.ceil(num_micro_batches / num_ranks), max_rows_on_a_rank))


def split_batch_for_ranks(batch: PackedBatch, num_ranks: int, num_micro_batches: int,
                          max_tokens_per_micro_batch: int | None = None) -> RankSplit:
    """Rank r gets `parts[r]`: its balanced rows, trimmed to their longest row, topped up with
    dummy rows to `num_micro_batches` rows so that every rank runs that many micro-batches.
    With a token budget, the count is also at least what the fullest rank needs to keep each
    micro-batch within it (`plan_micro_batches`); every rank then cuts its rows into exactly
    that many."""
    row_tokens = [sum(lens) for lens in batch.seq_lens_per_row]
    rows_per_rank = assign_rows_to_ranks(row_tokens, num_ranks)
    micro = micro_batches_per_rank(num_micro_batches, num_ranks,
                                   max(len(rows) for rows in rows_per_rank))
    if max_tokens_per_micro_batch is not None:
        micro = max(micro, *(len(plan_micro_batches([row_tokens[i] for i in rows], 1,
                                                    max_tokens_per_micro_batch))
                             for rows in rows_per_rank))
    parts = []
    for rows in rows_per_rank:
        part = batch.select_rows(rows).trimmed() if rows else None
        parts.append(_with_dummy_rows(part, micro - len(rows)))
    return RankSplit(parts=parts, num_micro_batches=micro, row_indices=rows_per_rank)


def _with_dummy_rows(batch: PackedBatch | None, count: int) -> PackedBatch:
    """`batch` plus `count` dummy rows (no units, nothing in the loss); a one-token-wide batch of
    dummies when `batch` is None."""
    if count <= 0:
        assert batch is not None
        return batch
    width = batch.input_ids_RL.shape[1] if batch is not None else 1
    device = batch.input_ids_RL.device if batch is not None else HOST
    tensors = {}
    for name, fill in _DUMMY_FILL.items():
        dtype = getattr(batch, name).dtype if batch is not None else _default_dtype(fill)
        dummy_RL = torch.full((count, width), fill, dtype=dtype, device=device)
        tensors[name] = dummy_RL if batch is None else torch.cat([getattr(batch, name), dummy_RL])
    lens = (batch.seq_lens_per_row if batch is not None else []) + [[] for _ in range(count)]
    return PackedBatch(**tensors, seq_lens_per_row=lens,
                       num_sequences=batch.num_sequences if batch is not None else 0)


def _default_dtype(fill: object) -> torch.dtype:
    if isinstance(fill, bool):
        return torch.bool
    return torch.float32 if isinstance(fill, float) else torch.long
