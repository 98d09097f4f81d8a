"""The report page: one self-contained HTML file (plots embedded as base64 PNG, styles inline,
no script) that any browser opens from disk, on a machine without network or W&B.

Sections: the runs and their status, their settings (for several runs, the settings that
differ), the health gates' signals against their bounds (`health_signals`), the curves
(`panels.PANELS`, each against step and wall time), the step distributions
(`panels.DISTRIBUTION_PANELS`, quantile bands; a run from before they were recorded has a
note instead), eval scores per
eval point, the time each step spent per part, and sample completions from the traces.
Every text that comes from a run (completions above all) is HTML-escaped.

Not here: reading runs (`run_data`), choosing samples (`samples`), drawing (`plots`).
"""

from __future__ import annotations

import base64
import html
import json
import math
from pathlib import Path
from typing import Any

import pandas as pd
from matplotlib.figure import Figure

from rlvr.checkpoint.atomic import write_text_atomic
from rlvr.report.health_signals import with_health_signals
from rlvr.report.panels import (DISTRIBUTION_PANELS, PANELS, eval_table, time_breakdown,
                                with_derived)
from rlvr.report.plan_panel import plan_section
import rlvr.report.plots as plots
from rlvr.report.run_data import RunData, load_run
from rlvr.report.samples import SampleChoice, pick_samples

# Settings shown for every run (dotted paths into config.yaml); for several runs, every
# setting whose values differ is shown too.
KEY_SETTINGS = (
    "model.name_or_path", "data.train", "experiment.total_episodes", "experiment.seed",
    "rollout.num_unique_prompts_rollout", "rollout.num_samples_per_prompt_rollout",
    "rollout.response_length", "rollout.temperature", "rollout.async_steps",
    "algorithm.loss_fn", "algorithm.advantage_normalization_type", "algorithm.beta",
    "algorithm.clip_lower", "algorithm.clip_higher", "algorithm.filter_zero_std_samples",
    "optimizer.learning_rate", "eval.local_eval_every",
)
NOT_SETTINGS = ("experiment.output_dir",)  # differs between any two runs; says nothing

STYLE = """
body { font-family: system-ui, sans-serif; margin: 24px; color: #222; max-width: 1400px; }
h1 { margin-bottom: 4px; } h2 { margin-top: 32px; border-bottom: 1px solid #ccc; }
table { border-collapse: collapse; margin: 8px 0; font-size: 13px; }
th, td { border: 1px solid #ddd; padding: 3px 6px; vertical-align: top; text-align: left; }
th { background: #f4f4f4; } tr.differs td { font-weight: bold; }
td.num { text-align: right; font-variant-numeric: tabular-nums; }
div.curves { display: grid; grid-template-columns: repeat(auto-fill, minmax(600px, 1fr));
              gap: 8px; }
img.plot { display: block; max-width: 100%; margin: 6px 0; }
div.text { white-space: pre-wrap; font-family: ui-monospace, monospace; font-size: 12px;
           max-height: 14em; overflow: auto; max-width: 520px; }
.warn { color: #a40; } .pick-best { color: #070; } .pick-worst { color: #b00; }
"""


def write_report(run_dirs: list[Path | str], output: Path | str | None = None) -> Path:
    """Read the runs, render the page, write it atomically; returns its path: by default
    `report.html` in the run's directory, or `report_compare.html` in the first run's for
    several runs."""
    runs = [load_run(d) for d in run_dirs]
    names = [r.name for r in runs]
    for r in runs:  # two runs/x/final: label them by their parent too
        if names.count(r.name) > 1:
            r.name = f"{r.path.resolve().parent.name}/{r.name}"
    if output is None:
        name = "report.html" if len(runs) == 1 else "report_compare.html"
        output = runs[0].path / name
    output = Path(output)
    output.parent.mkdir(parents=True, exist_ok=True)
    write_text_atomic(output, render_page(runs))
    return output


def render_page(runs: list[RunData]) -> str:
    title = "rlvr report: " + " vs ".join(r.name for r in runs)
    parts = [f"<!DOCTYPE html><html><head><meta charset='utf-8'><title>{_e(title)}</title>"
             f"<style>{STYLE}</style></head><body>", f"<h1>{_e(title)}</h1>",
             _runs_section(runs), _settings_section(runs), _health_section(runs),
             _curves_section(runs), _distributions_section(runs),
             _eval_section(runs), _time_section(runs), plan_section(runs),
             _samples_section(runs),
             "</body></html>"]
    return "\n".join(p for p in parts if p)


def _runs_section(runs: list[RunData]) -> str:
    rows = "".join(f"<tr><td>{_e(r.name)}</td><td>{_e(str(r.path.resolve()))}</td>"
                   f"<td>{_e(r.status)}</td></tr>" for r in runs)
    warnings = "".join(f"<li class='warn'>{_e(w)}</li>" for r in runs for w in r.warnings)
    return ("<table class='runs'><tr><th>run</th><th>directory</th><th>status</th></tr>"
            f"{rows}</table>" + (f"<ul>{warnings}</ul>" if warnings else ""))


def _settings_section(runs: list[RunData]) -> str:
    flat = [_flatten(r.config) for r in runs]
    keys = [k for k in KEY_SETTINGS if any(k in f for f in flat)]
    if len(runs) > 1:
        everything = sorted({k for f in flat for k in f} - set(NOT_SETTINGS))
        keys += [k for k in everything
                 if k not in keys and len({_show(f.get(k)) for f in flat}) > 1]
    if not keys:
        return ""
    head = "".join(f"<th>{_e(r.name)}</th>" for r in runs)
    rows = []
    for key in keys:
        values = [_show(f.get(key)) for f in flat]
        differs = " class='differs'" if len(set(values)) > 1 else ""
        cells = "".join(f"<td>{_e(v)}</td>" for v in values)
        rows.append(f"<tr{differs}><td>{_e(key)}</td>{cells}</tr>")
    return (f"<h2>Settings</h2><table class='settings'><tr><th>setting</th>{head}</tr>"
            + "".join(rows) + "</table>")


def _curves_section(runs: list[RunData]) -> str:
    frames = [(r.name, with_derived(r.metrics)) for r in runs]
    images = []
    for panel in PANELS:
        fig = plots.panel_figure(panel, frames)
        if fig is not None:
            images.append(_img(fig, panel.title))
    return ("<h2>Curves</h2><p>Each quantity against training step (left) and wall time "
            "(right). A metric equal at every step to one already in its plot is not drawn "
            "again.</p><div class='curves'>" + "".join(images) + "</div>")


def _health_section(runs: list[RunData]) -> str:
    fig = plots.health_figure([(r.name, with_health_signals(r.metrics, r.config), r.config)
                               for r in runs])
    if fig is None:
        return ""
    off = [r.name for r in runs if r.config.get("health", {}).get("enabled") is False]
    note = (f" The gates were off (<code>health.enabled=false</code>) in: {_e(', '.join(off))}."
            if off else "")
    return ("<h2>Health</h2><p>Each health gate's signal per step against the bounds it "
            "warns or stops at (the run's <code>health.*</code>; docs/health.md). The trend "
            f"gates compare windows of steps and have no line here.{note}</p>"
            + _img(fig, "Health gates"))


def _distributions_section(runs: list[RunData]) -> str:
    frames = [(r.name, r.distributions) for r in runs]
    images = []
    for panel in DISTRIBUTION_PANELS:
        fig = plots.distribution_figure(panel, frames)
        if fig is not None:
            images.append(_img(fig, panel.title))
    missing = [r.name for r in runs if r.distributions is None]
    note = (f"<p>No distributions.jsonl (a run from before distributions were recorded): "
            f"{_e(', '.join(missing))}.</p>" if missing else "")
    if not images and not note:
        return ""
    return ("<h2>Distributions</h2><p>Each step's values, not only their mean: the median "
            "(line), the middle half and the middle 90% (bands), min and max (dotted).</p>"
            + note + "<div class='curves'>" + "".join(images) + "</div>")


def _eval_section(runs: list[RunData]) -> str:
    blocks = []
    for r in runs:
        table = eval_table(r.metrics)
        if table.empty:
            continue
        head = "".join(f"<th>{_e(c.removeprefix('eval/'))}</th>" for c in table.columns)
        rows = "".join(
            f"<tr><td class='num'>{step}</td>"
            + "".join(f"<td class='num'>{_number(v)}</td>" for v in row) + "</tr>"
            for step, row in zip(table.index, table.itertuples(index=False)))
        blocks.append(f"<h3>{_e(r.name)}</h3><table class='eval'><tr><th>step</th>{head}</tr>"
                      f"{rows}</table>")
    return "<h2>Eval scores</h2>" + "".join(blocks) if blocks else ""


def _time_section(runs: list[RunData]) -> str:
    images = []
    for r in runs:
        fig = plots.time_breakdown_figure(r.name, time_breakdown(r.metrics))
        if fig is not None:
            images.append(_img(fig, f"time per step: {r.name}"))
    return "<h2>Time per step</h2>" + "".join(images) if images else ""


SAMPLE_COLUMNS = (  # (trace column, heading); advantage and trained only for training rows
    ("step", "step"), ("eval_set", "set"), ("pick", "pick"), ("prompt", "prompt"),
    ("completion", "completion"), ("ground_truth", "expected"), ("score", "score"),
    ("reward", "reward"), ("advantage", "advantage"), ("trained", "trained"),
    ("finish_reason", "finish"), ("completion_tokens", "tokens"),
    ("policy_version", "version"),
)


def _samples_section(runs: list[RunData]) -> str:
    blocks = []
    for r in runs:
        traces, where = r.traces, r.traces_kind
        if traces is None:
            blocks.append(f"<h3>{_e(r.name)}</h3><p>No traces: train with "
                          "<code>logging.save_traces=true</code> to see completions here.</p>")
            continue
        picked = pick_samples(traces, SampleChoice())
        point = "eval point" if where == "eval" else "training step"
        blocks.append(f"<h3>{_e(r.name)}: {where} completions</h3>"
                      f"<p>Best and worst by reward and a few at random, per {point} (up to "
                      f"{SampleChoice().max_points}, spread over the run).</p>"
                      + _samples_table(picked, eval_rows=where == "eval"))
    return "<h2>Sample completions</h2>" + "".join(blocks)


def _samples_table(picked: pd.DataFrame, eval_rows: bool) -> str:
    skip = {"advantage", "trained"} if eval_rows else {"eval_set"}
    columns = [(c, h) for c, h in SAMPLE_COLUMNS if c not in skip and c in picked.columns]
    head = "".join(f"<th>{_e(h)}</th>" for _, h in columns)
    rows = []
    for record in picked.to_dict("records"):
        cells = []
        for column, _ in columns:
            value = record[column]
            if column in ("prompt", "completion"):
                cells.append(f"<td><div class='text'>{_e(str(value))}</div></td>")
            elif column == "pick":
                cells.append(f"<td class='pick-{_e(value)}'>{_e(value)}</td>")
            else:
                cells.append(f"<td class='num'>{_number(value)}</td>")
        rows.append("<tr class='sample'>" + "".join(cells) + "</tr>")
    return f"<table class='samples'><tr>{head}</tr>{''.join(rows)}</table>"


def _img(fig: Figure, title: str) -> str:
    data = base64.b64encode(plots.figure_png(fig)).decode("ascii")
    return (f"<img class='plot' alt='{_e(title)}' title='{_e(title)}' "
            f"src='data:image/png;base64,{data}'>")


def _flatten(tree: Any, prefix: str = "") -> dict[str, Any]:
    if not isinstance(tree, dict):
        return {prefix: tree}
    out: dict[str, Any] = {}
    for key, value in tree.items():
        out.update(_flatten(value, f"{prefix}.{key}" if prefix else str(key)))
    return out


def _show(value: Any) -> str:
    """A setting as a short text: data sources by name, other lists and dicts as JSON."""
    if isinstance(value, list) and all(isinstance(v, dict) and "name" in v for v in value):
        return ", ".join(str(v["name"]) for v in value)
    if isinstance(value, (list, dict)):
        return json.dumps(value)
    return "" if value is None else str(value)


def _number(value: Any) -> str:
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return ""
    if isinstance(value, float):
        return f"{value:.4g}"
    return _e(str(value))


def _e(text: str) -> str:
    return html.escape(str(text), quote=True)
