"""The console's line per step: a timestamp, the step, and the key figures under their metric
names (`objective/verifiable_reward=0.36`, as in metrics.jsonl, TensorBoard and the report, so a
figure seen on the console is found by the name it was printed under). A rich progress bar
instead on a terminal.

What it is not: the logging setup (`rlvr.console`) or the metrics themselves.
"""

from __future__ import annotations

import math
import sys
import time

from rlvr.console import TIME_FORMAT

# The figures of the step line, in order: training reward, held-out score (steps with an
# eval), the loss, response length and the step's seconds.
CONSOLE_KEYS = ["objective/verifiable_reward", "eval/scores", "loss/policy_avg",
                "val/sequence_lengths", "time/step"]


def is_finite_number(value) -> bool:
    """A real number the sinks write as it is (a NaN, an infinity or a non-number they do not:
    `rlvr.metrics.sinks`)."""
    return isinstance(value, (int, float)) and math.isfinite(value)


def step_figures(metrics: dict[str, float], keys: list[str]) -> str:
    """`name=value` for each of `keys` the step has (finite), three significant digits."""
    return " ".join(f"{key}={metrics[key]:.3g}" for key in keys
                    if key in metrics and is_finite_number(metrics[key]))


class ConsoleSink:
    """A rich progress bar with the key figures on a terminal; else one timestamped line per
    step, the format of rlvr's log lines (`rlvr.console.TIME_FORMAT`)."""

    def __init__(self, total_steps: int, keys: list[str], stream=None, clock=time.localtime):
        self.keys = keys
        self.total = total_steps
        self.stream = stream or sys.stdout
        self._clock = clock
        self._progress = None
        if self.stream.isatty():
            from rich.progress import BarColumn, Progress, TextColumn, TimeRemainingColumn

            self._progress = Progress(TextColumn("step {task.completed}/{task.total}"), BarColumn(),
                                      TimeRemainingColumn(), TextColumn("{task.fields[figures]}"))
            self._task = self._progress.add_task("train", total=total_steps, figures="")
            self._progress.start()

    def log(self, step: int, metrics: dict[str, float]) -> None:
        figures = step_figures(metrics, self.keys)
        if self._progress is not None:
            self._progress.update(self._task, completed=step, figures=figures)
        else:
            stamp = time.strftime(TIME_FORMAT, self._clock())
            print(f"{stamp} step {step}/{self.total} {figures}".rstrip(), file=self.stream,
                  flush=True)

    def close(self) -> None:
        if self._progress is not None:
            self._progress.stop()
