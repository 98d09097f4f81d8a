"""Reading a run directory for the report: its metrics, its step distributions, its config
and its traces, as they are on disk at this moment (a run may still be writing them).

Lenient where a run in progress or a killed one leaves things half done: a torn last line of
`metrics.jsonl` is skipped (the run is then reported in progress), a trace file that is not a
whole Parquet file is skipped with a warning naming it; a run without `distributions.jsonl`
(one from before distributions were recorded) is reported without them. Strict where nothing
can be shown: a directory without metrics raises `ReportError` naming what is missing.

Not here: what to plot (`panels`), drawing (`plots`), the page (`page`).
"""

from __future__ import annotations

import json
import logging
import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq
import yaml

from rlvr.data.readers import bounded_lines
from rlvr.metrics.distributions import QUANTILES, DistributionSummary, distributions_path
from rlvr.metrics.traces import step_files
from rlvr.report.samples import SampleChoice, spread_points
from rlvr.run.paths import RunPaths

log = logging.getLogger(__name__)


class ReportError(ValueError):
    """A run directory the report cannot be made from; the message says which and why."""


@dataclass
class RunData:
    """One run as read from disk. `metrics` has one row per logged step (column
    `training_step`, ascending) plus `wall_time`, seconds since the run first started,
    continuous across resumes."""

    name: str  # the directory's name: the label of this run's curves
    path: Path
    config: dict[str, Any]  # config.yaml as written by the run; {} if missing or unreadable
    metrics: pd.DataFrame
    torn_last_line: bool = False  # the run was writing (or was killed writing) a line
    # The trace rows the page shows completions from: those of up to `max_points` eval points
    # spread over the run, or, for a run without eval traces, of as many training steps.
    # Only those files are read: a long run's traces can be large.
    traces: pd.DataFrame | None = None
    traces_kind: str | None = None  # "eval" | "training"; None without traces
    warnings: list[str] = field(default_factory=list)  # shown on the page
    # One row per (step, distribution): `training_step`, `name`, and the summary's figures
    # (`DISTRIBUTION_COLUMNS`); None for a run without `distributions.jsonl`.
    distributions: pd.DataFrame | None = None

    @property
    def last_step(self) -> int:
        return int(self.metrics["training_step"].max())

    @property
    def expected_steps(self) -> int | None:
        """`Config.num_training_steps` from the saved config, None without one."""
        try:
            r = self.config["rollout"]
            per_step = int(r["num_unique_prompts_rollout"]) * int(
                r["num_samples_per_prompt_rollout"])
            return int(self.config["experiment"]["total_episodes"]) // per_step
        except (KeyError, TypeError, ValueError, ZeroDivisionError):
            return None

    @property
    def status(self) -> str:
        expected = self.expected_steps
        if expected is not None and self.last_step >= expected and not self.torn_last_line:
            return f"finished, {self.last_step} steps"
        of = f" of {expected}" if expected is not None else ""
        return f"in progress (or stopped), {self.last_step}{of} steps so far"


def load_run(path: Path | str, max_points: int = SampleChoice.max_points) -> RunData:
    path = Path(path)
    if not path.is_dir():
        raise ReportError(f"{path}: not a directory (expected a run's output_dir)")
    metrics_path = RunPaths(path).metrics
    if not metrics_path.is_file():
        raise ReportError(f"{path}: no metrics.jsonl; is this a run's output_dir "
                          f"(experiment.output_dir)?")
    warnings: list[str] = []
    rows, torn = read_metrics(metrics_path, warnings)
    if not rows:
        raise ReportError(f"{metrics_path}: no step logged yet")
    metrics = pd.DataFrame(rows)
    metrics["wall_time"] = wall_clock(metrics.get("time/elapsed", pd.Series(dtype=float)),
                                      len(metrics))
    run = RunData(name=path.resolve().name, path=path, config=_read_config(path, warnings),
                  metrics=metrics, torn_last_line=torn, warnings=warnings,
                  distributions=read_distributions(distributions_path(path), warnings))
    for kind, folder in (("eval", RunPaths(path).eval_traces), ("training", RunPaths(path).traces)):
        files = step_files(folder)
        shown = [files[step] for step in spread_points(list(files), max_points)]
        run.traces = read_traces(shown, warnings)
        if run.traces is not None:
            run.traces_kind = kind
            break
    return run


MAX_METRICS_LINE_BYTES = 1 << 20  # a step record is a few kilobytes
MAX_TRACE_FILE_BYTES = 256 << 20  # one step's samples, uncompressed


def read_metrics(path: Path, warnings: list[str]) -> tuple[list[dict[str, Any]], bool]:
    """The step records of `metrics.jsonl`, and whether its last line was torn (a run in the
    middle of writing it). A run restarted in the same directory without resuming appends
    steps from 0 again: the later attempt's records replace the earlier ones from the step it
    restarted at."""
    rows: list[dict[str, Any]] = []
    torn = False
    with open(path, "rb") as f:  # line by line: a run directory is the report's input, any size
        for number, raw in enumerate(bounded_lines(f, MAX_METRICS_LINE_BYTES), start=1):
            if isinstance(raw, int):  # a step record is kilobytes: this is no step record
                warnings.append(f"{path} line {number}: skipped, {raw:,} bytes (a step record "
                                f"is under {MAX_METRICS_LINE_BYTES:,})")
                continue
            if not raw.endswith(b"\n"):  # the file should end with a newline
                torn = bool(raw.strip())
                break
            _add_step(rows, raw.decode("utf-8", errors="replace"), path, number, warnings)
    return rows, torn


def _add_step(rows: list[dict[str, Any]], line: str, path: Path, number: int,
              warnings: list[str]) -> None:
    """`line`'s step record onto `rows`, replacing the records of the same or later steps."""
    if line.strip():
        try:
            record = json.loads(line)
            step = int(record["training_step"])
        except (ValueError, KeyError, TypeError, RecursionError) as e:
            warnings.append(f"{path} line {number}: skipped, not a step record ({e})")
            return
        while rows and rows[-1]["training_step"] >= step:
            rows.pop()
        rows.append({k: (math.nan if v is None else v) for k, v in record.items()})


DISTRIBUTION_COLUMNS = ("count", "nonfinite", "min", "max", "mean", "std", *QUANTILES)


def read_distributions(path: Path, warnings: list[str]) -> pd.DataFrame | None:
    """`distributions.jsonl`'s summaries, one row per step and distribution (the histograms
    are not kept: the report draws quantile bands); None without the file or a summary. Read
    as `metrics.jsonl` is (`read_metrics`: bounded lines, a later attempt's steps replacing
    an earlier one's); an entry that is not a summary is skipped with a warning."""
    if not path.is_file():
        return None
    records, _ = read_metrics(path, warnings)
    rows = []
    for record in records:
        step = record["training_step"]
        for name, value in record.items():
            if name == "training_step":
                continue
            try:
                summary = DistributionSummary.from_json(value)
            except (KeyError, TypeError, ValueError) as e:
                warnings.append(f"{path} step {step}: {name!r} skipped, not a distribution "
                                f"summary ({_first_line(e)})")
                continue
            rows.append({"training_step": step, "name": str(name),
                         **{c: getattr(summary, c) for c in DISTRIBUTION_COLUMNS[:6]},
                         **summary.quantiles})
    return pd.DataFrame(rows) if rows else None


def wall_clock(elapsed: pd.Series, length: int) -> list[float]:
    """Seconds since the run first started, per row: `time/elapsed` counts from the start of
    the process that logged it, so a resumed run starts again at 0; each restart continues
    from the last time logged before it. Rows without the metric carry the previous value."""
    values = elapsed.tolist() if len(elapsed) else [math.nan] * length
    out, offset, previous, last_logged = [], 0.0, math.nan, 0.0
    for value in values:
        if isinstance(value, (int, float)) and math.isfinite(value):
            if math.isfinite(previous) and value < previous:
                offset = last_logged
            previous = value
            last_logged = offset + value
        out.append(last_logged)
    return out


def read_traces(files: list[Path], warnings: list[str]) -> pd.DataFrame | None:
    """The trace files as one frame, None if none reads. A file that does not read (cut off
    by a full disk, written by something other than rlvr's atomic writer) is skipped with a
    warning naming it."""
    tables = []
    for file in files:
        try:
            # A compressed file of kilobytes can hold gigabytes: its metadata says how many.
            meta = pq.ParquetFile(file).metadata
            size = sum(meta.row_group(i).total_byte_size for i in range(meta.num_row_groups))
            if size > MAX_TRACE_FILE_BYTES:
                message = (f"{file}: skipped, {size:,} bytes uncompressed (a step's traces "
                           f"are read whole, up to {MAX_TRACE_FILE_BYTES:,})")
                log.warning(message)
                warnings.append(message)
                continue
            tables.append(pq.read_table(file))
        except (pa.ArrowException, OSError) as e:
            message = f"{file}: skipped, not a whole Parquet file ({_first_line(e)})"
            log.warning(message)
            warnings.append(message)
    if not tables:
        return None
    try:
        return pa.concat_tables(tables, promote_options="default").to_pandas()
    except pa.ArrowException as e:
        raise ReportError(f"{files[0].parent}: trace files of incompatible schemas ({e})") from e


def _read_config(path: Path, warnings: list[str]) -> dict[str, Any]:
    config_path = RunPaths(path).config
    if not config_path.is_file():
        warnings.append(f"{config_path}: missing; the run's settings are not shown")
        return {}
    try:
        loaded = yaml.safe_load(config_path.read_text(encoding="utf-8"))
    except yaml.YAMLError as e:
        warnings.append(f"{config_path}: unreadable ({_first_line(e)})")
        return {}
    return loaded if isinstance(loaded, dict) else {}


def _first_line(e: Exception) -> str:
    return str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
