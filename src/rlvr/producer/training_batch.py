"""From scored groups to a packed training batch: advantages, zero-std filtering, packing.

The math lives in `rlvr.algorithm` as pure tensor functions; this module only moves records into
tensors and back, and reports what it dropped.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from rlvr.algorithm.advantages import compute_group_advantages
from rlvr.algorithm.filtering import filter_zero_std_groups
from rlvr.algorithm.packing import SequenceToPack, pack_sequences, packed_ratio
from rlvr.device import HOST
from rlvr.types import PackedBatch, Sample


@dataclass(frozen=True)
class BatchSettings:
    advantage_normalization_type: str
    filter_zero_std_samples: bool
    pack_length: int
    pad_token_id: int
    mask_truncated_completions: bool = False
    packing: str = "in_order"
    # With mask_truncated_completions: False drops truncated samples before advantages (their
    # group's baseline is its finished samples', open-instruct); True keeps them in the
    # baseline and only withholds their gradient.
    truncated_in_baseline: bool = False
    # A group's prompt packed once before its responses, or each sequence whole (what varlen
    # attention needs); the run's resolved `algorithm.share_prompts` (`DevicePlan`).
    share_prompts: bool = True


@dataclass
class TrainingBatch:
    batch: PackedBatch | None  # None when every group was filtered out
    samples: list[Sample]  # the kept samples, advantages filled in, in packing order
    metrics: dict[str, float]


def build_training_batch(groups: list[list[Sample]], settings: BatchSettings) -> TrainingBatch:
    if not groups:  # active sampling found no group with reward spread
        return TrainingBatch(batch=None, samples=[], metrics={"real_batch_size_ratio": 0.0})
    drop_first = settings.mask_truncated_completions and not settings.truncated_in_baseline
    num_truncated_masked = sum(s.completion.truncated for g in groups for s in g) \
        if settings.mask_truncated_completions else 0
    if drop_first:
        groups = [[s for s in g if not s.completion.truncated] for g in groups]
    # Groups may now differ in size: advantages and the spread filter are taken per group.
    advantages, kept_N, stats = _advantages_and_filter(groups, settings)
    samples: list[Sample] = []
    for n, group in enumerate(groups):
        if not kept_N[n]:
            continue
        for sample, advantage in zip(group, advantages[n]):
            sample.advantage = advantage
            # truncated_in_baseline: the answer shaped its group's baseline, adds no gradient.
            if settings.mask_truncated_completions and sample.completion.truncated:
                continue
            samples.append(sample)
    metrics = {**stats, "batch/masked_truncated": float(num_truncated_masked)}
    if not samples:
        return TrainingBatch(batch=None, samples=[], metrics=metrics)
    advantages_S = torch.tensor([s.advantage for s in samples], device=HOST)
    metrics.update({"val/advantages_mean": float(advantages_S.mean()),
                    "val/advantages_min": float(advantages_S.min()),
                    "val/advantages_max": float(advantages_S.max())})
    seqs = [SequenceToPack(prompt_ids=list(s.prompt.token_ids),
                           response_ids=s.completion.token_ids_T,
                           response_logprobs=s.completion.logprobs_T,
                           advantage=s.advantage, index=i,
                           loss_mask=s.completion.loss_mask_T) for i, s in enumerate(samples)]
    batch = pack_sequences(seqs, settings.pack_length, pad_id=settings.pad_token_id,
                           share_prompts=settings.share_prompts, strategy=settings.packing)
    metrics["packed_ratio"] = packed_ratio(batch)
    metrics["batch/packed_rows"] = float(batch.num_rows)
    return TrainingBatch(batch=batch, samples=samples, metrics=metrics)


def _advantages_and_filter(groups: list[list[Sample]], settings: BatchSettings
                           ) -> tuple[list[list[float]], list[bool], dict[str, float]]:
    """Per group: its advantages, whether it is kept (reward spread, or no filtering), and the
    batch's filter statistics. Equal-size groups go through the tensor functions in one call;
    groups of different sizes (truncated samples dropped) one by one. An empty group is
    dropped."""
    sizes = {len(g) for g in groups}
    if len(sizes) == 1 and 0 not in sizes:
        rewards_NG = torch.tensor([[s.reward for s in g] for g in groups], dtype=torch.float32,
                                  device=HOST)
        parts = [(rewards_NG, list(range(len(groups))))]
    else:
        parts = [(torch.tensor([[s.reward for s in g]], dtype=torch.float32, device=HOST), [n])
                 for n, g in enumerate(groups) if g]
    advantages: list[list[float]] = [[] for _ in groups]
    kept_N = [False] * len(groups)
    zero = solved = 0
    solved_fraction: list[float] = []
    for rewards_NG, index in parts:
        advantages_NG = compute_group_advantages(rewards_NG, settings.advantage_normalization_type)
        kept = filter_zero_std_groups(rewards_NG, settings.filter_zero_std_samples)
        zero, solved = zero + kept.num_zero_std_groups, solved + kept.num_solved_groups
        solved_fraction += (rewards_NG >= 1.0).float().mean(dim=1).tolist()
        for row, n in enumerate(index):
            advantages[n] = advantages_NG[row].tolist()
            kept_N[n] = bool(kept.keep_N[row])
    return advantages, kept_N, {
        "real_batch_size_ratio": sum(kept_N) / len(groups),
        "batch/filtered_prompts_zero": float(zero),
        "batch/filtered_prompts_solved": float(solved),
        # mean over prompts of the fraction of samples with full marks
        "batch/percent_solved_mean": (sum(solved_fraction) / len(solved_fraction)
                                      if solved_fraction else 0.0),
    }
