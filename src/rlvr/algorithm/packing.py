"""Pack prompt+response sequences into rows of at most `pack_length` tokens.

Samples of a group share their prompt: it is packed once, followed by each response, and every
response attends to the prompt and to itself only. With a 44-token prompt and 8 samples of ~25
tokens that runs 2.3x fewer tokens through the learner than packing each sequence whole.

Written here rather than taken from a library because the layout is ours: per-token advantages,
engine logprobs and sample indices travel aligned with the tokens, and a unit (a prompt and its
responses) is never split across rows (its logprobs need the whole prefix in the same row).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from rlvr.device import HOST
from rlvr.types import PackedBatch


@dataclass(frozen=True)
class SequenceToPack:
    prompt_ids: list[int]
    response_ids: list[int]
    response_logprobs: list[float]  # the engine's logprob of each response token
    advantage: float
    index: int  # the sample's index in the step
    # 1 where the model sampled the token, 0 where it was given it (a multi-turn episode's
    # feedback or tool output): a 0 token is attended to but has no logprob and no gradient.
    # None: every response token is the model's.
    loss_mask: list[int] | None = None


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


@dataclass
class _Unit:
    """A prompt and the sequences whose responses follow it in one row."""

    prompt_ids: list[int]
    members: list[int]
    length: int


def group_into_units(seqs: list[SequenceToPack], pack_length: int,
                     share_prompts: bool) -> list[_Unit]:
    """Consecutive sequences with the same prompt share one copy of it while the unit fits."""
    units: list[_Unit] = []
    for i, s in enumerate(seqs):
        n = len(s.prompt_ids) + len(s.response_ids)
        if n > pack_length:
            raise ValueError(f"sequence {s.index} has {n} tokens, more than "
                             f"pack_length={pack_length}")
        last = units[-1] if units else None
        if (share_prompts and last is not None and last.prompt_ids == s.prompt_ids
                and last.length + len(s.response_ids) <= pack_length):
            last.members.append(i)
            last.length += len(s.response_ids)
        else:
            units.append(_Unit(list(s.prompt_ids), [i], n))
    return units


def assign_rows_first_fit_decreasing(lengths: list[int], pack_length: int) -> list[list[int]]:
    """Longest first, each into the first row with room: fewer rows than in-order packing
    when lengths vary. Within a row, items keep their original order."""
    rows: list[list[int]] = []
    free: list[int] = []
    for i in sorted(range(len(lengths)), key=lambda i: (-lengths[i], i)):
        if lengths[i] > pack_length:
            raise ValueError(f"item {i} has {lengths[i]} tokens, more than "
                             f"pack_length={pack_length}")
        row = next((r for r, room in enumerate(free) if lengths[i] <= room), None)
        if row is None:
            rows.append([])
            free.append(pack_length)
            row = len(rows) - 1
        rows[row].append(i)
        free[row] -= lengths[i]
    return [sorted(row) for row in rows]


PACKING_STRATEGIES = {"in_order": assign_rows_in_order,
                      "first_fit_decreasing": assign_rows_first_fit_decreasing}


def pack_sequences(seqs: list[SequenceToPack], pack_length: int, pad_id: int = 0,
                   share_prompts: bool = True, strategy: str = "in_order") -> PackedBatch:
    """Units (a prompt and its responses) go into rows by `strategy`; rows are padded to the
    longest row, not to pack_length, to save compute."""
    for s in seqs:
        if len(s.response_logprobs) != len(s.response_ids):
            raise ValueError(f"sequence {s.index}: {len(s.response_logprobs)} logprobs for "
                             f"{len(s.response_ids)} response tokens")
        if s.loss_mask is not None and len(s.loss_mask) != len(s.response_ids):
            raise ValueError(f"sequence {s.index}: {len(s.loss_mask)} loss-mask entries for "
                             f"{len(s.response_ids)} response tokens")
    units = group_into_units(seqs, pack_length, share_prompts)
    if strategy not in PACKING_STRATEGIES:
        raise ValueError(f"packing '{strategy}' is not one of {sorted(PACKING_STRATEGIES)}")
    rows = PACKING_STRATEGIES[strategy]([u.length for u in units], pack_length)
    width = max((sum(units[u].length for u in row) for row in rows), default=1)
    t = _empty_tensors(len(rows), width, pad_id)
    for r, row in enumerate(rows):
        start, segment = 0, 0
        for u in row:
            start, segment = _write_unit(t, r, start, segment, units[u], seqs)
    return PackedBatch(**t, seq_lens_per_row=[[units[u].length for u in row] for row in rows],
                       num_sequences=len(seqs))


def _empty_tensors(rows: int, width: int, pad_id: int) -> dict[str, torch.Tensor]:
    shape = (rows, width)
    return {
        "input_ids_RL": torch.full(shape, pad_id, dtype=torch.long, device=HOST),
        "position_ids_RL": torch.zeros(shape, dtype=torch.long, device=HOST),
        "response_mask_RL": torch.zeros(shape, dtype=torch.bool, device=HOST),
        "advantages_RL": torch.zeros(shape, dtype=torch.float32, device=HOST),
        "engine_logprobs_RL": torch.zeros(shape, dtype=torch.float32, device=HOST),
        "sequence_index_RL": torch.full(shape, -1, dtype=torch.long, device=HOST),
        "segment_ids_RL": torch.full(shape, -1, dtype=torch.long, device=HOST),
        "parent_segment_RL": torch.full(shape, -1, dtype=torch.long, device=HOST),
        "predictor_pos_RL": torch.full(shape, -1, dtype=torch.long, device=HOST),
    }


def _write_unit(t: dict[str, torch.Tensor], r: int, start: int, segment: int, unit: _Unit,
                seqs: list[SequenceToPack]) -> tuple[int, int]:
    p = len(unit.prompt_ids)
    prompt_segment = segment
    t["input_ids_RL"][r, start:start + p] = torch.tensor(unit.prompt_ids, device=HOST)
    t["position_ids_RL"][r, start:start + p] = torch.arange(p, device=HOST)
    t["segment_ids_RL"][r, start:start + p] = prompt_segment
    t["sequence_index_RL"][r, start:start + p] = seqs[unit.members[0]].index
    cursor = start + p
    for i in unit.members:
        s, n = seqs[i], len(seqs[i].response_ids)
        segment += 1
        span = slice(cursor, cursor + n)
        t["input_ids_RL"][r, span] = torch.tensor(s.response_ids, dtype=torch.long,
                                                  device=HOST)
        t["position_ids_RL"][r, span] = torch.arange(p, p + n, device=HOST)
        t["response_mask_RL"][r, span] = True if s.loss_mask is None else \
            torch.tensor(s.loss_mask, dtype=torch.bool, device=HOST)
        t["advantages_RL"][r, span] = s.advantage
        t["engine_logprobs_RL"][r, span] = torch.tensor(s.response_logprobs,
                                                        dtype=torch.float32, device=HOST)
        t["sequence_index_RL"][r, span] = s.index
        t["segment_ids_RL"][r, span] = segment
        t["parent_segment_RL"][r, span] = prompt_segment
        # The first response token is predicted from the prompt's last position.
        t["predictor_pos_RL"][r, cursor] = start + p - 1
        t["predictor_pos_RL"][r, cursor + 1:cursor + n] = torch.arange(cursor, cursor + n - 1,
                                                                       device=HOST)
        cursor += n
    return cursor, segment + 1


def packed_ratio(batch: PackedBatch) -> float:
    """Real tokens over the tokens the rows occupy (1.0 means no padding)."""
    return batch.num_tokens / max(batch.input_ids_RL.numel(), 1)


def split_rows(num_rows: int, num_parts: int) -> list[list[int]]:
    """Contiguous, as-even-as-possible parts; a part is empty only if num_rows < num_parts."""
    base, extra = divmod(num_rows, num_parts)
    parts, start = [], 0
    for k in range(num_parts):
        size = base + (1 if k < extra else 0)
        parts.append(list(range(start, start + size)))
        start += size
    return parts


def micro_batch_cost(row_tokens: list[int]) -> int:
    """Token slots a micro-batch of these rows occupies: its rows times its longest row (rows
    are padded to the longest; the learner trims the columns past it). Empty rows (the dummy
    rows that keep learner ranks in step) are not counted."""
    return sum(1 for t in row_tokens if t) * max(row_tokens, default=0)


def plan_micro_batches(row_tokens: list[int], num_parts: int,
                       max_tokens: int | None = None) -> list[list[int]]:
    """Rows cut into contiguous micro-batches. Without `max_tokens`: `num_parts` even parts
    (`split_rows`). With it (verl's dynamic batch size): as few parts as keep every part's
    `micro_batch_cost` within `max_tokens`, and at least `num_parts` (a rank must match its
    peers' count); a row alone may exceed the budget (rows never split). The loss is
    normalised by the whole batch's count, so the cut never changes the gradient."""
    if max_tokens is None:
        return split_rows(len(row_tokens), num_parts)
    parts: list[list[int]] = []
    for row, tokens in enumerate(row_tokens):
        if parts and micro_batch_cost([row_tokens[r] for r in parts[-1]] + [tokens]) <= max_tokens:
            parts[-1].append(row)
        else:
            parts.append([row])
    # Too few parts: halve the part with the most rows (halving never raises a part's cost).
    while len(parts) < num_parts and any(len(p) > 1 for p in parts):
        k = max(range(len(parts)), key=lambda i: (len(parts[i]), -i))
        half = (len(parts[k]) + 1) // 2
        parts[k:k + 1] = [parts[k][:half], parts[k][half:]]
    return parts + [[] for _ in range(num_parts - len(parts))]
