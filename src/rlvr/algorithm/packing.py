"""Pack prompt+response sequences into rows of at most `pack_length` tokens.

Written here rather than taken from a library because the layout is ours: per-token advantages,
engine logprobs and sample indices must travel aligned with the tokens, and a sequence is never
split across rows (its logprobs need the whole prefix in the same row).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from rlvr.types import PackedBatch


@dataclass(frozen=True)
class SequenceToPack:
    prompt_ids: list[int]
    response_ids: list[int]
    response_logprobs: list[float]  # the engine's logprob of each response token
    advantage: float
    index: int  # the sample's index in the step


def assign_rows_in_order(lengths: list[int], pack_length: int) -> list[list[int]]:
    """Greedy in-order packing: a sequence joins the current row if it fits, else opens one."""
    rows: list[list[int]] = []
    used = pack_length  # forces the first sequence to open a row
    for i, n in enumerate(lengths):
        if n > pack_length:
            raise ValueError(f"sequence {i} has {n} tokens, more than pack_length={pack_length}")
        if used + n > pack_length:
            rows.append([])
            used = 0
        rows[-1].append(i)
        used += n
    return rows


def pack_sequences(seqs: list[SequenceToPack], pack_length: int, pad_id: int = 0) -> PackedBatch:
    """Rows are padded to the longest row, not to pack_length, to save compute."""
    lengths = [len(s.prompt_ids) + len(s.response_ids) for s in seqs]
    for s in seqs:
        if len(s.response_logprobs) != len(s.response_ids):
            raise ValueError(f"sequence {s.index}: {len(s.response_logprobs)} logprobs for "
                             f"{len(s.response_ids)} response tokens")
    rows = assign_rows_in_order(lengths, pack_length)
    width = max((sum(lengths[i] for i in row) for row in rows), default=1)
    shape = (len(rows), width)
    input_ids = torch.full(shape, pad_id, dtype=torch.long)
    position_ids = torch.zeros(shape, dtype=torch.long)
    response_mask = torch.zeros(shape, dtype=torch.bool)
    advantages = torch.zeros(shape, dtype=torch.float32)
    engine_logprobs = torch.zeros(shape, dtype=torch.float32)
    sequence_index = torch.full(shape, -1, dtype=torch.long)
    for r, row in enumerate(rows):
        start = 0
        for i in row:
            s, n, p = seqs[i], lengths[i], len(seqs[i].prompt_ids)
            end = start + n
            input_ids[r, start:end] = torch.tensor(s.prompt_ids + s.response_ids)
            position_ids[r, start:end] = torch.arange(n)
            response_mask[r, start + p:end] = True
            advantages[r, start + p:end] = s.advantage
            engine_logprobs[r, start + p:end] = torch.tensor(s.response_logprobs)
            sequence_index[r, start:end] = s.index
            start = end
    return PackedBatch(
        input_ids_RL=input_ids, position_ids_RL=position_ids, response_mask_RL=response_mask,
        advantages_RL=advantages, engine_logprobs_RL=engine_logprobs,
        sequence_index_RL=sequence_index,
        seq_lens_per_row=[[lengths[i] for i in row] for row in rows])


def packed_ratio(batch: PackedBatch) -> float:
    """Real tokens over the tokens the rows occupy (1.0 means no padding)."""
    real = sum(sum(lens) for lens in batch.seq_lens_per_row)
    return real / max(batch.input_ids_RL.numel(), 1)


def split_rows(num_rows: int, num_parts: int) -> list[list[int]]:
    """Contiguous, as-even-as-possible parts; a part is empty only if num_rows < num_parts."""
    base, extra = divmod(num_rows, num_parts)
    parts, start = [], 0
    for k in range(num_parts):
        size = base + (1 if k < extra else 0)
        parts.append(list(range(start, start + size)))
        start += size
    return parts
