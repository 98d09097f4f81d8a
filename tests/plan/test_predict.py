"""The plan's arithmetic against figures worked out by hand (`rlvr.plan.predict`)."""

from __future__ import annotations

import json
from dataclasses import replace

import pytest

from rlvr.plan.predict import (any_kept_probability, decode_steps, largest_micro_batch,
                               likely_most_kept, packed_rows, predict, response_tokens_mean)
from rlvr.plan.records import (Calibration, LearnerCalibration, LinearCost,
                               MemoryCalibration, RolloutCalibration, RunShape,
                               calibration_from_json, dumps, plan_record)

SHAPE = RunShape(num_steps=10, prompts_per_step=2, samples_per_prompt=2, response_length=8,
                 pack_length=64, packing="in_order", share_prompts=True, filter_zero_std=True,
                 num_mini_batches=1, num_epochs=1, micro_batches=2, micro_batch_tokens=None,
                 async_steps=0)
# Two completions stopped (2 and 3 tokens), two were cut at the calibration's cap of 4.
ROLLOUT = RolloutCalibration(max_tokens=4, num_samples=4, prompt_tokens_mean=10.0,
                             finished_lengths=(2, 3), num_truncated=2,
                             generation_s=LinearCost(fixed=1.0, per_unit=0.5),
                             scoring_s_per_sample=0.25, spread_fraction=None)
CAL = Calibration(
    device="cpu", engine="TransformersEngine", build_s=3.0, rollout=ROLLOUT,
    learner=LearnerCalibration(row_tokens=64, update_s=LinearCost(fixed=2.0, per_unit=4.0),
                               activation_bytes=LinearCost(fixed=50.0, per_unit=2.0),
                               memory_source="resident set"),
    memory=MemoryCalibration(device_total=2000.0, before_model=400.0, after_build=1000.0,
                             build_peak=900.0,
                             policy_params=100.0, reference_params=0.0, trainable_params=100.0,
                             engine=300.0, kv_cache=200.0),
    weight_sync_s=0.5, seconds=20.0)


def test_a_line_through_two_readings_and_noise_never_makes_it_negative():
    assert LinearCost.through((1, 3.0), (3, 7.0)) == LinearCost(fixed=1.0, per_unit=2.0)
    # The larger reading came out cheaper (noise): flat, at the larger reading.
    assert LinearCost.through((1, 5.0), (2, 4.0)) == LinearCost(fixed=4.0, per_unit=0.0)
    with pytest.raises(ValueError):
        LinearCost.through((2, 1.0), (2, 3.0))


def test_cut_completions_count_as_whole_response_length():
    # (2 + 3 + 8 + 8) / 4 = 5.25; the engine runs until the longest: 8 steps.
    assert response_tokens_mean(ROLLOUT, 8) == 5.25
    assert decode_steps(ROLLOUT, 8) == 8
    whole = replace(ROLLOUT, num_truncated=0, finished_lengths=(2, 3, 6))
    assert decode_steps(whole, 8) == 6


def test_rows_come_from_the_runs_packer():
    # Two groups, each a 10-token prompt shared by two 5-token responses: 20 tokens a unit,
    # both in one 64-token row.
    assert packed_rows(10, [5], 2, 2, SHAPE) == ([40], 40)
    # Unshared prompts: four 15-token sequences, still one row.
    assert packed_rows(10, [5], 2, 2, replace(SHAPE, share_prompts=False)) == ([60], 60)
    # Rows of at most 32 tokens: one unit a row.
    assert packed_rows(10, [5], 2, 2, replace(SHAPE, pack_length=32)) == ([20, 20], 20)
    # Lengths as the calibration saw them, in turn: the first group's responses (5 and 20)
    # outgrow a 32-token row with their shared prompt (35), so the group is two units, and
    # in-order packing gives three rows: [10+5], [10+20], [10+5+5] (the second group shares).
    assert packed_rows(10, [5, 20, 5, 5], 2, 2, replace(SHAPE, pack_length=32)) == (
        [15, 30, 20], 30)


def test_the_largest_micro_batch_is_cut_as_the_learner_cuts():
    # Three rows of width 30 in two micro-batches: [2 rows, 1 row] -> 60 token slots.
    assert largest_micro_batch([30, 30, 30], 30, replace(SHAPE, micro_batches=2)) == 60
    # Two mini-batches of two rows, each in two micro-batches: one row, 30 slots.
    shape = replace(SHAPE, num_mini_batches=2, micro_batches=2)
    assert largest_micro_batch([30, 30, 30, 30], 30, shape) == 30


def test_a_step_worked_by_hand():
    p = predict(CAL, SHAPE)
    # Generation 1 + 0.5 x 8 decode steps; scoring 0.25 x 4 samples.
    assert p.seconds["generation"] == 5.0 and p.seconds["scoring"] == 1.0
    # Responses round to 5 tokens: one row of 40. A 64-token row costs 4 s, so a 40-token row
    # 2.5 s, plus 2 s for the one optimizer step.
    assert p.tokens["rows"] == 1 and p.tokens["row_width"] == 40
    assert p.seconds["learner"] == pytest.approx(4.5)
    assert p.seconds["weight_sync"] == 0.5
    assert p.seconds["step"] == pytest.approx(11.0)
    assert p.seconds["total"] == pytest.approx(3.0 + 10 * 11.0)
    assert p.tokens["prompt"] == 40 and p.tokens["response"] == 21.0


def test_memory_worked_by_hand():
    p = predict(CAL, SHAPE)
    m = p.memory
    # The one 40-token row is the largest micro-batch: 50 + 2 x 40 = 130 bytes of activations.
    assert m["activations"] == 130.0
    assert (m["gradients"], m["optimizer"]) == (100.0, 200.0)
    assert m["peak"] == 1000.0 + 100.0 + 200.0 + 130.0
    assert (m["engine_weights"], m["kv_cache"]) == (100.0, 200.0)
    assert m["runtime"] == 400.0  # held before the model loaded
    assert p.fits
    small = replace(CAL, memory=replace(CAL.memory, device_total=1400.0))
    assert not predict(small, SHAPE).fits
    # A build that passed a higher peak than training reaches sets the peak.
    loud = replace(CAL, memory=replace(CAL.memory, build_peak=5000.0))
    assert predict(loud, SHAPE).memory["peak"] == 5000.0


def test_filtered_groups_train_less_and_skip_updates():
    # One of two groups had reward spread: (1 + 1/2) / (2 + 1) = 1/2 of groups train, and a
    # step keeps none with chance 0.5^2 = 0.25.
    assert any_kept_probability(0.5, 2) == 0.75
    cal = replace(CAL, rollout=replace(ROLLOUT, spread_fraction=0.5))
    p = predict(cal, SHAPE)
    # 0.75 x 2 s of optimizer step + 0.5 rows x 2.5 s; sync 0.75 x 0.5 s.
    assert p.seconds["learner"] == pytest.approx(2.75)
    assert p.seconds["weight_sync"] == pytest.approx(0.375)
    assert p.tokens["kept_groups"] == 1.0
    # Without the filter every group trains, whatever the rewards.
    assert predict(cal, replace(SHAPE, filter_zero_std=False)).seconds["learner"] == 4.5


def test_more_mini_batches_and_epochs():
    # Two epochs: each row forward and backward twice (2 x 2.5 s) and two optimizer steps.
    assert predict(CAL, replace(SHAPE, num_epochs=2)).seconds["learner"] == pytest.approx(9.0)
    # Two mini-batches: two optimizer steps, and the second's half row has a no-grad pass
    # first (a third of 2.5 s, for 0.5 rows).
    p = predict(CAL, replace(SHAPE, num_mini_batches=2))
    assert p.seconds["learner"] == pytest.approx(2 * 2.0 + 2.5 + 2.5 / 3 * 0.5)


def test_async_steps_take_the_slower_side():
    p = predict(CAL, replace(SHAPE, async_steps=1))
    # Generation and scoring (6 s) beside the update and sync (5 s).
    assert p.seconds["step"] == pytest.approx(6.0)


def test_the_largest_step_the_run_is_likely_to_see():
    # Four groups kept with chance 1/4, four steps: P(a step keeps <= 1) = 0.738, and
    # 0.738^4 = 0.30 < 1/2; P(<= 2) = 0.949, 0.949^4 = 0.81: two groups.
    assert likely_most_kept(4, 0.25, 4) == 2
    assert likely_most_kept(4, 1.0, 10) == 4 and likely_most_kept(4, 0.0, 10) == 0
    assert likely_most_kept(2, 0.5, 1) == 1  # P(<= 1) = 3/4
    # No group of the calibration's two had spread: taken as (0 + 1/2) / (2 + 1) = 1/6. Of
    # two groups a step keeps at most one with chance 1 - (1/6)^2 = 0.972, 0.972^10 = 0.75:
    # the peak step keeps one group, one 20-token row, 50 + 2 x 20 bytes of activations.
    cal = replace(CAL, rollout=replace(ROLLOUT, spread_fraction=0.0))
    p = predict(cal, SHAPE)
    assert p.tokens["kept_groups"] == pytest.approx(2 / 6)
    assert p.memory["activations"] == 90.0


def test_a_calibration_comes_back_from_its_json():
    record = json.loads(dumps(plan_record(CAL, SHAPE, predict(CAL, SHAPE), {})))
    assert calibration_from_json(record["calibration"]) == CAL
