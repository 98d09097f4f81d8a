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
from rlvr.types import PackedBatch, Sample


@dataclass(frozen=True)
class BatchSettings:
    advantage_normalization_type: str
    filter_zero_std_samples: bool
    pack_length: int
    pad_token_id: int
    mask_truncated_completions: bool = False
    packing: str = "in_order"


@dataclass
class TrainingBatch:
    batch: PackedBatch | None  # None when every group was filtered out
    samples: list[Sample]  # the kept samples, advantages filled in, in packing order
    metrics: dict[str, float]


def build_training_batch(groups: list[list[Sample]], settings: BatchSettings) -> TrainingBatch:
    if not groups:  # active sampling found no group with reward spread
        return TrainingBatch(batch=None, samples=[], metrics={"real_batch_size_ratio": 0.0})
    rewards_NG = torch.tensor([[s.reward for s in g] for g in groups], dtype=torch.float32)
    advantages_NG = compute_group_advantages(rewards_NG, settings.advantage_normalization_type)
    kept = filter_zero_std_groups(rewards_NG, settings.filter_zero_std_samples)
    samples: list[Sample] = []
    num_truncated_masked = 0
    for n, group in enumerate(groups):
        if not bool(kept.keep_N[n]):
            continue
        for g, sample in enumerate(group):
            sample.advantage = float(advantages_NG[n, g])
            # A truncated answer still shaped its group's baseline; it just adds no gradient.
            if settings.mask_truncated_completions and sample.completion.truncated:
                num_truncated_masked += 1
                continue
            samples.append(sample)
    metrics = {
        "real_batch_size_ratio": kept.real_batch_size_ratio,
        "batch/filtered_prompts_zero": float(kept.num_zero_std_groups),
        "batch/filtered_prompts_solved": float(kept.num_solved_groups),
        # mean over prompts of the fraction of samples with full marks
        "batch/percent_solved_mean": float((rewards_NG >= 1.0).float().mean()),
        "batch/masked_truncated": float(num_truncated_masked),
    }
    if not samples:
        return TrainingBatch(batch=None, samples=[], metrics=metrics)
    advantages = torch.tensor([s.advantage for s in samples])
    metrics.update({"val/advantages_mean": float(advantages.mean()),
                    "val/advantages_min": float(advantages.min()),
                    "val/advantages_max": float(advantages.max())})
    seqs = [SequenceToPack(prompt_ids=list(s.prompt.token_ids),
                           response_ids=s.completion.token_ids_T,
                           response_logprobs=s.completion.logprobs_T,
                           advantage=s.advantage, index=i) for i, s in enumerate(samples)]
    batch = pack_sequences(seqs, settings.pack_length, pad_id=settings.pad_token_id,
                           strategy=settings.packing)
    metrics["packed_ratio"] = packed_ratio(batch)
    metrics["batch/packed_rows"] = float(batch.num_rows)
    return TrainingBatch(batch=batch, samples=samples, metrics=metrics)
