"""Where step metrics go: JSONL (always), the terminal, TensorBoard and W&B, chosen from the
logging config by `build_sinks`; and phase timing. Sinks receive finished numbers; they compute
nothing about training. A step's distributions (`rlvr.metrics.distributions`) go, as
fixed-size summaries, to `distributions.jsonl`, TensorBoard and W&B histograms.
"""

from __future__ import annotations

import json
import logging
import os
import time
from contextlib import contextmanager
from pathlib import Path
from typing import Iterator, Protocol

from rlvr.checkpoint.atomic import write_text_atomic
from rlvr.config import Config
from rlvr.metrics.console import CONSOLE_KEYS, ConsoleSink, is_finite_number
from rlvr.metrics.distributions import DistributionSummary, distributions_path
from rlvr.run.paths import RunPaths


class MetricSink(Protocol):
    def log(self, step: int, metrics: dict[str, float]) -> None: ...

    def close(self) -> None: ...


class DistributionSink(Protocol):
    """A sink that also takes a step's distributions (`rlvr.metrics.distributions`), as
    fixed-size summaries."""

    def log_distributions(self, step: int, summaries: dict[str, DistributionSummary]
                          ) -> None: ...


def _finite_or_none(value: float) -> float | None:
    return value if is_finite_number(value) else None


class JsonlSink:
    """One JSON object per step. Each line goes out in one write, flushed and fsynced, so a
    crash leaves whole lines only; a torn last line from an older crash is dropped on open."""

    def __init__(self, path: Path):
        self.path = Path(path)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        _drop_torn_last_line(self.path)
        self._file = open(self.path, "a", encoding="utf-8")

    def log(self, step: int, metrics: dict[str, float]) -> None:
        self.write({"training_step": step,
                    **{k: _finite_or_none(v) for k, v in metrics.items()}})

    def write(self, record: dict) -> None:
        """One record (with its `training_step`) as one line, flushed and fsynced."""
        self._file.write(json.dumps(record) + "\n")
        self._file.flush()
        os.fsync(self._file.fileno())

    def close(self) -> None:
        self._file.close()

    @staticmethod
    def truncate_after(path: Path, step: int) -> None:
        """Keep lines with training_step <= step (for resume), rewritten atomically."""
        path = Path(path)
        if not path.exists():
            return
        kept = []
        for number, line in enumerate(path.read_text(encoding="utf-8", errors="replace")
                                      .splitlines(keepends=True), 1):
            try:
                if line.endswith("\n") and json.loads(line)["training_step"] <= step:
                    kept.append(line)
            except (ValueError, KeyError, TypeError, RecursionError):  # torn, or not a record
                logging.getLogger(__name__).warning(
                    "%s line %d is not a metrics record; dropped", path, number)
        write_text_atomic(path, "".join(kept))


class DistributionsJsonlSink:
    """`distributions.jsonl`: one line per step, `{"training_step": N, name: summary, ...}`
    (`DistributionSummary.to_json`). Written as `metrics.jsonl` is (`JsonlSink`: whole lines,
    a torn last line dropped on open) and truncated with it on resume (`rlvr.run.build`)."""

    def __init__(self, path: Path):
        self._lines = JsonlSink(path)

    def log(self, step: int, metrics: dict[str, float]) -> None:
        """Scalars go to `metrics.jsonl`, not here."""

    def log_distributions(self, step: int, summaries: dict[str, DistributionSummary]) -> None:
        if summaries:
            self._lines.write({"training_step": step,
                               **{name: s.to_json() for name, s in summaries.items()}})

    def close(self) -> None:
        self._lines.close()


def _drop_torn_last_line(path: Path) -> None:
    if not path.exists() or path.stat().st_size == 0:
        return
    text = path.read_text(encoding="utf-8")
    if not text.endswith("\n"):
        write_text_atomic(path, text[: text.rfind("\n") + 1])


class TensorBoardSink:
    def __init__(self, log_dir: Path):
        from torch.utils.tensorboard import SummaryWriter

        self._writer = SummaryWriter(log_dir=str(log_dir))

    def log(self, step: int, metrics: dict[str, float]) -> None:
        for key, value in metrics.items():
            if _finite_or_none(value) is not None:
                self._writer.add_scalar(key, value, step)
        self._writer.flush()

    def log_distributions(self, step: int, summaries: dict[str, DistributionSummary]) -> None:
        """Each summary's histogram as it is (`add_histogram_raw`: the values are not here)."""
        for name, s in summaries.items():
            self._writer.add_histogram_raw(
                f"distributions/{name}", min=s.min, max=s.max, num=s.count,
                sum=s.mean * s.count, sum_squares=s.count * (s.std ** 2 + s.mean ** 2),
                bucket_limits=s.bin_edges[1:], bucket_counts=s.bin_counts, global_step=step)
        self._writer.flush()

    def close(self) -> None:
        self._writer.close()


class WandbSink:
    def __init__(self, project: str, name: str, mode: str, config: dict, dir: Path):
        os.environ.setdefault("WANDB_SILENT", "true")
        import wandb

        self._run = wandb.init(project=project, name=name, mode=mode, config=config,
                               dir=str(dir), reinit="finish_previous")

    def log(self, step: int, metrics: dict[str, float]) -> None:
        self._run.log(metrics, step=step)

    def log_distributions(self, step: int, summaries: dict[str, DistributionSummary]) -> None:
        import wandb

        self._run.log({f"distributions/{name}": wandb.Histogram(
            np_histogram=(s.bin_counts, s.bin_edges)) for name, s in summaries.items()},
            step=step)

    def close(self) -> None:
        self._run.finish()


class MetricsLogger:
    def __init__(self, sinks: list[MetricSink]):
        self.sinks = sinks

    def log(self, step: int, metrics: dict[str, float]) -> None:
        for sink in self.sinks:
            sink.log(step, metrics)

    def log_distributions(self, step: int, summaries: dict[str, DistributionSummary]) -> None:
        """To the sinks that take distributions (`DistributionSink`); the others skip them."""
        for sink in self.sinks:
            if callable(getattr(sink, "log_distributions", None)):
                sink.log_distributions(step, summaries)

    def close(self) -> None:
        for sink in self.sinks:
            sink.close()

    def __enter__(self) -> "MetricsLogger":
        return self

    def __exit__(self, *exc) -> None:
        self.close()


class StepTimer:
    """`with timer("generation"): ...` accumulates seconds under `time/generation`."""

    def __init__(self) -> None:
        self.seconds: dict[str, float] = {}

    @contextmanager
    def __call__(self, name: str) -> Iterator[None]:
        start = time.perf_counter()
        try:
            yield
        finally:
            self.seconds[name] = self.seconds.get(name, 0.0) + time.perf_counter() - start

    def as_metrics(self) -> dict[str, float]:
        return {f"time/{k}": v for k, v in self.seconds.items()}


def build_sinks(cfg: Config, output_dir: Path, config_dict: dict) -> list[MetricSink]:
    sinks: list[MetricSink] = [JsonlSink(RunPaths(output_dir).metrics),
                               DistributionsJsonlSink(distributions_path(output_dir))]
    if cfg.logging.progress_bar:
        sinks.append(ConsoleSink(cfg.num_training_steps, CONSOLE_KEYS))
    if cfg.logging.with_tracking:
        sinks.append(TensorBoardSink(RunPaths(output_dir).tensorboard))
        if cfg.logging.wandb_mode != "disabled":
            sinks.append(WandbSink(project=cfg.logging.wandb_project, name=cfg.experiment.name,
                                   mode=cfg.logging.wandb_mode, config=config_dict,
                                   dir=output_dir))
    return sinks
