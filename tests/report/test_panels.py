"""What goes in which plot, derived throughput, and the time breakdown of a step."""

import math

import pandas as pd

from rlvr.config.schema import HealthConfig
from rlvr.report.health_signals import (GATE_SIGNALS, VERIFIER_ERROR_RATE, signal_bounds,
                                        with_health_signals)
from rlvr.report.panels import (PANELS, Panel, eval_table, panel_metrics, time_breakdown,
                                with_derived)


def test_panel_patterns_pick_metrics_of_any_eval_set_in_pattern_order():
    metrics = pd.DataFrame({"eval/math/pass@1": [0.1, 0.2], "eval/gsm8k/pass@1": [0.3, 0.4],
                            "eval/gsm8k/pass@4": [0.5, 0.6], "eval/scores": [0.2, 0.3],
                            "time/eval": [1.0, 1.0], "objective/verifiable_reward": [0.0, 0.1],
                            "eval/never": [math.nan, math.nan]})
    panel = Panel("Eval", "score", ("eval/*pass@*", "eval/scores", "eval/never"))
    assert panel_metrics(panel, metrics) == ["eval/gsm8k/pass@1", "eval/gsm8k/pass@4",
                                             "eval/math/pass@1", "eval/scores"]


def test_a_metric_repeating_one_already_shown_is_left_out():
    # One eval set: the pooled figure is the set's own.
    metrics = pd.DataFrame({"eval/addition/mean_reward": [0.1, math.nan, 0.3],
                            "eval/scores": [0.1, math.nan, 0.3]})
    panel = Panel("Eval", "score", ("eval/*mean_reward", "eval/scores"))
    assert panel_metrics(panel, metrics) == ["eval/addition/mean_reward"]


def test_every_metric_the_issue_asks_for_has_a_panel():
    names = ["objective/verifiable_reward", "eval/addition/pass@1", "objective/kl1_avg",
             "policy/entropy_avg", "val/sequence_lengths", "policy/clipfrac_avg",
             "learner_tokens_per_second_step"]
    metrics = pd.DataFrame({name: [float(i)] for i, name in enumerate(names)})
    assert {m for p in PANELS for m in panel_metrics(p, metrics)} == set(names)


def test_every_gate_reading_one_step_has_its_signal_in_the_health_panel():
    """The mismatch panel, generalised: each gate of `rlvr.run.health.GATES` that compares a
    step's value with a bound has its signal and bounds there; the trend gates do not."""
    from rlvr.run import health

    gates = {g.__name__ for g in health.GATES}
    trends = {"reward_vs_heldout", "length_growth", "shaping_carries_reward"}
    assert {s.gate for s in GATE_SIGNALS} == gates - trends
    assert {s.metric for s in GATE_SIGNALS} >= {health.DIFF, health.KL, health.ENTROPY,
                                                health.CLIPFRAC}
    fields = set(HealthConfig.__dataclass_fields__)
    assert all(f in fields for s in GATE_SIGNALS for _, f in s.bounds)


def test_bounds_are_the_runs_own_else_the_defaults():
    clip = next(s for s in GATE_SIGNALS if s.gate == "clip_fraction")
    diff = next(s for s in GATE_SIGNALS if s.metric == "debug/engine_vs_local_logprob_diff_mean")
    assert signal_bounds(clip, {"health": {"clipfrac_max": 0.25}}) == [
        ("warn: health.clipfrac_max", 0.25)]
    assert signal_bounds(diff, {}) == [("warn: health.mismatch_warn_logprob_diff", 0.1),
                                       ("stop: health.mismatch_stop_logprob_diff", 0.5)]
    assert signal_bounds(clip, {"health": "garbage"}) == [("warn: health.clipfrac_max", 0.3)]


def test_the_verifier_failure_rate_is_made_from_the_logged_counts():
    metrics = pd.DataFrame({"training_step": [0, 1, 2],
                            "batch/prompts_sampled": [math.nan, 2.0, 2.0],
                            "reward/verifier_errors": [math.nan, 1.0, 0.0],
                            "reward/verifier_timeouts": [math.nan, 1.0, math.nan]})
    config = {"rollout": {"num_samples_per_prompt_rollout": 4}}
    rates = with_health_signals(metrics, config)[VERIFIER_ERROR_RATE].tolist()
    assert math.isnan(rates[0]) and rates[1:] == [0.25, 0.0]  # 2 of 8 samples, then none
    assert VERIFIER_ERROR_RATE not in with_health_signals(metrics, {}).columns


def test_generation_throughput_is_samples_times_length_over_generation_time():
    metrics = pd.DataFrame({"training_step": [0, 1, 2], "episode": [0.0, 8.0, 16.0],
                            "val/sequence_lengths": [math.nan, 10.0, 20.0],
                            "time/generation": [math.nan, 4.0, 0.0]})
    derived = with_derived(metrics)["derived/generation_tokens_per_second"].tolist()
    assert math.isnan(derived[0]) and derived[1] == 20.0 and math.isnan(derived[2])


def test_time_breakdown_of_a_synchronous_step_takes_scoring_out_of_generation():
    metrics = pd.DataFrame({"training_step": [0, 1], "time/generation": [math.nan, 5.0],
                            "time/scoring": [math.nan, 1.0], "time/training": [math.nan, 3.0],
                            "time/weight_sync": [math.nan, 0.5], "time/eval": [2.0, math.nan]})
    frame = time_breakdown(metrics)
    assert list(frame.columns) == ["generation", "scoring", "training", "weight sync", "eval"]
    assert frame.loc[1].tolist() == [4.0, 1.0, 3.0, 0.5, 0.0]
    assert frame.loc[0].tolist() == [0.0, 0.0, 0.0, 0.0, 2.0]


def test_time_breakdown_of_an_asynchronous_step_leaves_overlapped_generation_out():
    metrics = pd.DataFrame({"training_step": [1], "time/generation": [5.0],
                            "time/trainer_waiting_for_data": [0.7], "time/training": [3.0]})
    frame = time_breakdown(metrics)
    assert list(frame.columns) == ["waiting for data", "training"]
    assert frame.loc[1].tolist() == [0.7, 3.0]


def test_eval_table_holds_the_eval_steps_only():
    metrics = pd.DataFrame({"training_step": [0, 1, 2], "eval/scores": [0.1, math.nan, 0.3],
                            "loss/policy_avg": [math.nan, 1.0, 1.0]})
    table = eval_table(metrics)
    assert table.index.tolist() == [0, 2] and table["eval/scores"].tolist() == [0.1, 0.3]
    assert eval_table(metrics.drop(columns="eval/scores")).empty
