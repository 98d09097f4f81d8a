"""Drawing the report's figures with matplotlib, as PNG bytes to embed in the page.

Figures are built with `matplotlib.figure.Figure` directly (its Agg canvas), never through
pyplot: no global figure state, no display needed, safe to call repeatedly. Each run's curves
keep a line style of their own and each metric a colour of its own, so two runs compared on
one axis stay tellable apart.

A distribution is drawn as quantile bands over the steps (p5-p95 light, p25-p75 darker,
the median a line); the health panel as one small plot per gate signal, each with its bounds
as horizontal lines.

Not here: which metrics go where (`panels`, `health_signals`), the page (`page`).
"""

from __future__ import annotations

import functools
import io

import pandas as pd
from matplotlib import rc_context
from matplotlib.figure import Figure
from matplotlib.ticker import MaxNLocator

from rlvr.report.health_signals import GATE_SIGNALS, signal_bounds
from rlvr.report.panels import DistributionPanel, Panel, panel_metrics

LINE_STYLES = ("-", "--", ":", "-.")
DPI = 90


def _plain_text(build):
    """Figures whose text is the run's, not TeX: a metric named `eval/$\\undefined$/pass@1`
    stopped the report. Text takes `text.parse_math` when it is made, so the whole build runs
    under it."""

    @functools.wraps(build)
    def built(*args, **kwargs):
        with rc_context({"text.parse_math": False}):
            return build(*args, **kwargs)

    return built


@_plain_text
def panel_figure(panel: Panel, runs: list[tuple[str, pd.DataFrame]]) -> Figure | None:
    """The panel against step (left) and wall time (right) for every run (name, metrics
    frame with `wall_time`); None when no run logged any of its metrics."""
    series = [(name, frame, panel_metrics(panel, frame)) for name, frame in runs]
    if not any(metrics for _, _, metrics in series):
        return None
    fig = Figure(figsize=(7.6, 3.2), dpi=DPI, layout="constrained")
    by_step, by_time = fig.subplots(1, 2)
    colours: dict[str, str] = {}
    for run_index, (name, frame, metrics) in enumerate(series):
        style = LINE_STYLES[run_index % len(LINE_STYLES)]
        for metric in metrics:
            colour = colours.setdefault(metric, f"C{len(colours) % 10}")
            # A metric is a number; anything else in its column (a string) is shown missing.
            values = pd.to_numeric(frame[metric], errors="coerce")
            rows = frame.assign(**{metric: values}).dropna(subset=[metric])
            label = metric if len(runs) == 1 else f"{name}: {metric}"
            # Markers show where the points are: an eval every few steps, or a short run.
            marker = "o" if len(rows) <= 40 else None
            for axis, x in ((by_step, "training_step"), (by_time, "wall_time")):
                scale = 60.0 if x == "wall_time" else 1.0
                axis.plot(rows[x] / scale, rows[metric], style, color=colour, marker=marker,
                          markersize=3, label=label if axis is by_step else None)
    by_step.set_xlabel("training step")
    by_step.xaxis.set_major_locator(MaxNLocator(integer=True))
    by_time.set_xlabel("wall time (minutes)")
    for axis in (by_step, by_time):
        axis.set_ylabel(panel.ylabel)
        axis.grid(alpha=0.3)
    fig.suptitle(panel.title, x=0.01, ha="left", fontsize=11, fontweight="bold")
    fig.legend(loc="outside lower center", ncols=2, fontsize=8, frameon=False)
    return fig


@_plain_text
def time_breakdown_figure(name: str, breakdown: pd.DataFrame) -> Figure | None:
    """Stacked bars, one per step, of the seconds each part took (`panels.time_breakdown`)."""
    if breakdown.empty:
        return None
    fig = Figure(figsize=(11, 3.2), dpi=DPI, layout="constrained")
    axis = fig.subplots()
    bottom = pd.Series(0.0, index=breakdown.index)
    for i, part in enumerate(breakdown.columns):
        axis.bar(breakdown.index, breakdown[part], width=0.8, bottom=bottom, label=part,
                 color=f"C{i % 10}")
        bottom = bottom + breakdown[part]
    axis.set_xlabel("training step")
    axis.xaxis.set_major_locator(MaxNLocator(integer=True))
    axis.set_ylabel("seconds")
    axis.set_title(f"Where each step's time went: {name}", loc="left", fontsize=11,
                   fontweight="bold")
    axis.grid(alpha=0.3, axis="y")
    fig.legend(loc="outside right upper", fontsize=8, frameon=False)
    return fig


@_plain_text
def distribution_figure(panel: DistributionPanel, runs: list[tuple[str, pd.DataFrame | None]]
                        ) -> Figure | None:
    """The panel's distribution over the steps of every run (name, `RunData.distributions`),
    one colour per run; None when no run recorded it."""
    series = [(name, frame[frame["name"] == panel.name].sort_values("training_step"))
              for name, frame in runs if frame is not None]
    series = [(name, rows) for name, rows in series if len(rows)]
    if not series:
        return None
    fig = Figure(figsize=(7.6, 3.2), dpi=DPI, layout="constrained")
    axis = fig.subplots()
    for index, (name, rows) in enumerate(series):
        colour, label = f"C{index % 10}", (f"{name}: " if len(runs) > 1 else "")
        steps = rows["training_step"]
        axis.fill_between(steps, rows["p5"], rows["p95"], color=colour, alpha=0.15,
                          linewidth=0, label=f"{label}p5-p95")
        axis.fill_between(steps, rows["p25"], rows["p75"], color=colour, alpha=0.35,
                          linewidth=0, label=f"{label}p25-p75")
        axis.plot(steps, rows["p50"], "-", color=colour, marker="o" if len(rows) <= 40 else None,
                  markersize=3, label=f"{label}median")
        axis.plot(steps, rows["min"], ":", color=colour, linewidth=0.8, label=f"{label}min, max")
        axis.plot(steps, rows["max"], ":", color=colour, linewidth=0.8)
    axis.set_xlabel("training step")
    axis.xaxis.set_major_locator(MaxNLocator(integer=True))
    axis.set_ylabel(panel.ylabel)
    axis.grid(alpha=0.3)
    axis.set_title(panel.title, loc="left", fontsize=11, fontweight="bold")
    fig.legend(loc="outside right upper", fontsize=8, frameon=False)
    return fig


BOUND_STYLES = {"warn": "#e69f00", "stop": "#d00000"}  # bound label -> line colour


@_plain_text
def health_figure(runs: list[tuple[str, pd.DataFrame, dict]]) -> Figure | None:
    """One plot per gate signal (`health_signals.GATE_SIGNALS`) some run logged: the signal
    against step for every run (name, metrics frame with the derived signals, config), and
    each run's bounds for it as dashed lines. None when no run logged any."""
    shown = [signal for signal in GATE_SIGNALS
             if any(signal.metric in frame.columns and frame[signal.metric].notna().any()
                    for _, frame, _ in runs)]
    if not shown:
        return None
    columns = min(len(shown), 3)
    rows = -(-len(shown) // columns)
    fig = Figure(figsize=(4.2 * columns, 2.9 * rows), dpi=DPI, layout="constrained")
    axes = fig.subplots(rows, columns, squeeze=False).ravel()
    for axis, signal in zip(axes, shown):
        bounds: dict[tuple[str, float], None] = {}
        for run_index, (name, frame, config) in enumerate(runs):
            if signal.metric in frame.columns:
                values = pd.to_numeric(frame[signal.metric], errors="coerce")
                points = frame.assign(value=values).dropna(subset=["value"])
                axis.plot(points["training_step"], points["value"],
                          LINE_STYLES[run_index % len(LINE_STYLES)], color="C0",
                          marker="o" if len(points) <= 40 else None, markersize=3,
                          label=name if len(runs) > 1 else None)
            bounds.update(dict.fromkeys(signal_bounds(signal, config)))
        for label, value in bounds:
            axis.axhline(value, linestyle="--", linewidth=1,
                         color=BOUND_STYLES.get(label.split(":")[0], "grey"), label=label)
        side = "below" if signal.below else "above"
        axis.set_title(f"{signal.gate}: {signal.metric}\n(fires {side} its bound)",
                       loc="left", fontsize=9)
        axis.set_xlabel("training step")
        axis.xaxis.set_major_locator(MaxNLocator(integer=True))
        axis.set_ylabel(signal.ylabel)
        axis.grid(alpha=0.3)
        axis.legend(fontsize=7, frameon=False)
    # One step range for every plot: a signal logged at one step is not a plot of its own
    # (and a single point does not get fractional step ticks).
    steps = pd.concat([frame["training_step"] for _, frame, _ in runs])
    if steps.max() > steps.min():
        for axis in axes[:len(shown)]:
            axis.set_xlim(steps.min(), steps.max())
    for axis in axes[len(shown):]:
        axis.set_visible(False)
    fig.suptitle("Health gates: each signal against its bounds", x=0.01, ha="left",
                 fontsize=11, fontweight="bold")
    return fig


def figure_png(fig: Figure) -> bytes:
    buffer = io.BytesIO()
    fig.savefig(buffer, format="png")
    return buffer.getvalue()
