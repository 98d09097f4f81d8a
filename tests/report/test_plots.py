"""The figures: every run's curves on the same axes, against step and wall time."""

import pandas as pd

from rlvr.report.panels import PANELS, time_breakdown, with_derived
from rlvr.report.plots import panel_figure, time_breakdown_figure
from rlvr.report.run_data import load_run
from tests.report.conftest import make_run

REWARD = PANELS[0]


def test_two_runs_share_each_plot_with_a_line_style_each(tmp_path):
    runs = [load_run(make_run(tmp_path, name="a")), load_run(make_run(tmp_path, 2, name="b"))]
    fig = panel_figure(REWARD, [(r.name, with_derived(r.metrics)) for r in runs])
    by_step, by_time = fig.axes
    labels = [line.get_label() for line in by_step.lines]
    assert labels == ["a: objective/verifiable_reward", "a: objective/scores",
                      "b: objective/verifiable_reward", "b: objective/scores"]
    assert {line.get_linestyle() for line in by_step.lines} == {"-", "--"}
    assert by_step.get_xlabel() == "training step" and by_time.get_xlabel() == "wall time (minutes)"
    # Run b logged steps 1-2: its curve has 2 points; wall time is in minutes.
    assert list(by_step.lines[2].get_xdata()) == [1, 2]
    assert list(by_time.lines[0].get_xdata()) == [11 / 60, 21 / 60, 31 / 60, 41 / 60]


def test_a_panel_without_any_metric_is_left_out():
    frame = pd.DataFrame({"training_step": [1], "wall_time": [1.0], "unrelated": [1.0]})
    assert panel_figure(REWARD, [("a", frame)]) is None


def test_time_bars_are_stacked(fake_run):
    breakdown = time_breakdown(load_run(fake_run).metrics)
    fig = time_breakdown_figure("run_a", breakdown)
    tops = {}
    for patch in fig.axes[0].patches:  # bars at x = step - 0.4
        step = round(patch.get_x() + 0.4)
        tops[step] = max(tops.get(step, 0.0), patch.get_y() + patch.get_height())
    assert tops[1] == breakdown.loc[1].sum() and tops[2] == breakdown.loc[2].sum()
    assert time_breakdown_figure("empty", pd.DataFrame()) is None


def test_a_distribution_is_drawn_as_bands_around_its_median(fake_run):
    from rlvr.report.panels import DISTRIBUTION_PANELS
    from rlvr.report.plots import distribution_figure

    reward = DISTRIBUTION_PANELS[0]
    run = load_run(fake_run)
    axis = distribution_figure(reward, [("run_a", run.distributions)]).axes[0]
    median = next(line for line in axis.lines if line.get_label() == "median")
    # rewards 0..step: the median is step / 2
    assert list(median.get_xdata()) == [1, 2, 3, 4]
    assert list(median.get_ydata()) == [0.5, 1.0, 1.5, 2.0]
    outer, inner = axis.collections[:2]  # p5-p95, then p25-p75
    assert outer.get_label() == "p5-p95" and inner.get_label() == "p25-p75"
    assert distribution_figure(reward, [("older", None)]) is None


def test_the_health_panel_draws_each_signal_with_the_runs_bounds(fake_run):
    from rlvr.report.health_signals import with_health_signals
    from rlvr.report.plots import health_figure

    run = load_run(fake_run)
    fig = health_figure([(run.name, with_health_signals(run.metrics, run.config), run.config)])
    axes = {a.get_title(loc="left").split("\n")[0]: a for a in fig.axes if a.get_visible()}
    assert set(axes) == {"mismatch: debug/engine_vs_local_logprob_diff_mean",
                         "mismatch: debug/engine_vs_local_kl",
                         "entropy_collapse: policy/entropy_avg",
                         "clip_fraction: policy/clipfrac_avg",
                         "verifier_errors: derived/verifier_error_rate"}

    def bounds(title):
        return {line.get_label(): line.get_ydata()[0] for line in axes[title].lines
                if line.get_linestyle() == "--"}

    # the run's own clipfrac_max (0.25), the defaults elsewhere
    assert bounds("clip_fraction: policy/clipfrac_avg") == {"warn: health.clipfrac_max": 0.25}
    assert bounds("mismatch: debug/engine_vs_local_kl") == {
        "warn: health.mismatch_warn_kl": 0.02, "stop: health.mismatch_stop_kl": 0.25}
    rate = axes["verifier_errors: derived/verifier_error_rate"].lines[0]
    assert list(rate.get_ydata()) == [0.0, 0.0, 0.125, 0.0]  # 1 of 2 x 4 samples at step 3
    empty = pd.DataFrame({"training_step": [1], "unrelated": [1.0]})
    assert health_figure([("a", empty, {})]) is None
