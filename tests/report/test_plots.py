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
