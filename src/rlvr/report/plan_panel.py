"""The report's "Plan against measured" table: what `rlvr plan` predicted for the run
(`<run>/plan.json`) beside what the run logged: a step's seconds by part (the same split as
the time breakdown, `panels.time_breakdown`: generation less scoring, scoring, training,
weight sync) and the step, and the peak memory (`memory/peak_rss_gb` on a CPU, the largest
`memory/peak_gb` on a GPU).

Measured seconds are means over the run's steps after the first (the first carries the
engine's and the learner's warm-up, which the prediction leaves out, as it does eval and
checkpoints); a step without an update counts 0 for training and sync, as the prediction's
means do. plan.json is read as untrusted input: bounded in size, and a file that is not
a plan is a warning, not a failure.
"""

from __future__ import annotations

import html
import json
import math
from pathlib import Path
from typing import Any

import pandas as pd

from rlvr.plan.records import PLAN_FORMAT
from rlvr.report.panels import time_breakdown
from rlvr.run.paths import RunPaths

GIB = 1024 ** 3
MAX_PLAN_BYTES = 1 << 20  # a plan is a few kilobytes

# (row label, the prediction's seconds key, the time breakdown's label; None: time/step)
SECOND_ROWS = (("generation (s)", "generation", "generation"),
               ("scoring (s)", "scoring", "scoring"),
               ("learner update (s)", "learner", "training"),
               ("weight sync (s)", "weight_sync", "weight sync"),
               ("step (s)", "step", None))


def read_plan(run_dir: Path, warnings: list[str]) -> dict[str, Any] | None:
    """The run's plan record, or None (no plan.json; one that cannot be read is a warning)."""
    path = RunPaths(run_dir).plan
    if not path.is_file():
        return None
    try:
        if path.stat().st_size > MAX_PLAN_BYTES:
            raise ValueError(f"larger than {MAX_PLAN_BYTES} bytes")
        record = json.loads(path.read_text(encoding="utf-8"))
        if not isinstance(record, dict) or record.get("format") != PLAN_FORMAT:
            raise ValueError(f"not a plan of format {PLAN_FORMAT}")
        prediction = record["prediction"]
        float(prediction["memory"]["peak"])
        {key: float(prediction["seconds"][key]) for _, key, _ in SECOND_ROWS}
    except (OSError, ValueError, KeyError, TypeError) as e:
        warnings.append(f"{path}: not shown ({e})")
        return None
    return record


def measured_steps(metrics: pd.DataFrame) -> pd.DataFrame:
    """The training steps the comparison averages: those after the first, when there are
    more than two (step 0, the start's record, is never one)."""
    steps = metrics[metrics["training_step"] >= 1]
    if "time/step" in steps.columns:
        steps = steps[steps["time/step"].notna()]
    return steps.iloc[1:] if len(steps) > 2 else steps


def peak_memory_gib(metrics: pd.DataFrame) -> float | None:
    for name in ("memory/peak_rss_gb", "memory/peak_gb"):
        if name in metrics.columns and metrics[name].notna().any():
            return float(metrics[name].max())
    return None


def comparison(record: dict[str, Any], metrics: pd.DataFrame) -> pd.DataFrame:
    """Rows: the quantities; columns: predicted, measured, error (predicted / measured - 1,
    NaN where nothing was measured)."""
    predicted = record["prediction"]
    steps = measured_steps(metrics)
    parts = time_breakdown(steps) if len(steps) else pd.DataFrame()
    rows = []
    for label, key, part in SECOND_ROWS:
        if part is None:
            value = steps["time/step"].mean() if "time/step" in steps.columns else math.nan
        else:
            value = parts[part].mean() if part in parts.columns else (0.0 if len(steps) else
                                                                      math.nan)
        rows.append((label, float(predicted["seconds"][key]), float(value)))
    peak = peak_memory_gib(metrics)
    rows.append(("peak memory (GiB)", float(predicted["memory"]["peak"]) / GIB,
                 math.nan if peak is None else peak))
    frame = pd.DataFrame(rows, columns=["quantity", "predicted", "measured"])
    frame["error"] = [p / m - 1 if m and not math.isnan(m) else math.nan
                      for p, m in zip(frame["predicted"], frame["measured"])]
    frame.attrs["steps"] = len(steps)
    return frame.set_index("quantity")


def plan_section(runs: list) -> str:
    """The page's section (HTML) for the runs (`RunData`) that have a plan; "" for none."""
    blocks = []
    for run in runs:
        warnings: list[str] = []  # shown here: the runs' section is drawn already
        record = read_plan(run.path, warnings)
        blocks += [f"<p class='warn'>{html.escape(w)}</p>" for w in warnings]
        if record is None:
            continue
        frame = comparison(record, run.metrics)
        rows = "".join(
            f"<tr><td>{html.escape(str(label))}</td>"
            + "".join(f"<td class='num'>{_cell(row[c], c == 'error')}</td>"
                      for c in ("predicted", "measured", "error")) + "</tr>"
            for label, row in frame.iterrows())
        made = html.escape(str(record.get("created", "")))
        blocks.append(f"<h3>{html.escape(run.name)}</h3><p>Predicted by <code>rlvr plan</code> "
                      f"({made}); measured: mean of {frame.attrs['steps']} step(s) after the "
                      "first, and the run's peak.</p><table class='plan'><tr><th>quantity</th>"
                      f"<th>predicted</th><th>measured</th><th>error</th></tr>{rows}</table>")
    return "<h2>Plan against measured</h2>" + "".join(blocks) if blocks else ""


def _cell(value: float, percent: bool) -> str:
    if value is None or math.isnan(value):
        return ""
    return f"{value:+.0%}" if percent else f"{value:.3g}"
