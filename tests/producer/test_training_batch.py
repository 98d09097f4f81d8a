"""From scored groups to a training batch: advantages, zero-std filtering, truncated samples."""

import pytest

from rlvr.producer.training_batch import BatchSettings, build_training_batch
from rlvr.types import Completion, Prompt, Sample

PROMPT = Prompt(id="p/0", messages=(), token_ids=(1, 2), ground_truth="1", verifiers=("x",),
                source="p")


def _group(rewards, truncated=()):
    return [Sample(prompt=PROMPT, completion=Completion([5, 6], [-1.0, -1.0],
                                                        "length" if i in truncated else "stop",
                                                        "t"), reward=r)
            for i, r in enumerate(rewards)]


def _settings(**kw):
    return BatchSettings("centered", True, 64, 0, **kw)


def test_truncated_samples_leave_the_group_before_advantages_by_default():
    # Rewards 1, 0, 0, 0 with the last two truncated. open-instruct drops them first: the
    # baseline is mean(1, 0) = 0.5, advantages +0.5 / -0.5. Before, they stayed in the baseline
    # (mean 0.25, advantages +0.75 / -0.25) and only their gradient was withheld.
    result = build_training_batch([_group([1, 0, 0, 0], truncated=(2, 3))],
                                  _settings(mask_truncated_completions=True))
    assert [s.advantage for s in result.samples] == pytest.approx([0.5, -0.5])
    assert result.metrics["batch/masked_truncated"] == 2.0


def test_truncated_in_baseline_keeps_them_in_the_mean_without_gradient():
    result = build_training_batch([_group([1, 0, 0, 0], truncated=(2, 3))],
                                  _settings(mask_truncated_completions=True,
                                            truncated_in_baseline=True))
    assert [s.advantage for s in result.samples] == pytest.approx([0.75, -0.25])
    assert result.batch.num_sequences == 2


def test_a_group_left_flat_or_empty_by_the_drop_is_filtered():
    groups = [_group([1, 0, 1], truncated=(1,)),  # finished: 1, 1 -> no spread
              _group([0, 1], truncated=(0, 1)),  # nothing finished
              _group([1, 0, 0])]
    result = build_training_batch(groups, _settings(mask_truncated_completions=True))
    assert result.metrics["real_batch_size_ratio"] == pytest.approx(1 / 3)
    assert len(result.samples) == 3 and result.metrics["batch/filtered_prompts_solved"] == 1


def test_without_masking_truncation_changes_nothing():
    result = build_training_batch([_group([1, 0, 0, 0], truncated=(2, 3))], _settings())
    assert [s.advantage for s in result.samples] == pytest.approx([0.75, -0.25, -0.25, -0.25])
