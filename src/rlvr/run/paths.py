"""The run directory's layout: every file and folder a run writes under `experiment.output_dir`,
named once. A part that reads or writes one of them asks `RunPaths(output_dir)` for it rather
than joining a literal, so the layout is written in one place (docs/reference/run-directory.md
describes it) and a test can list it.

A leaf: imports nothing of rlvr, so checkpoint, metrics, report, serving and launch modules use
it without importing the loop.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path


@dataclass(frozen=True)
class RunPaths:
    """The paths of one run directory, `root`."""

    root: Path

    def __init__(self, root: str | Path) -> None:
        object.__setattr__(self, "root", Path(root))

    @property
    def config(self) -> Path:
        return self.root / "config.yaml"  # the run's resolved config (`rlvr.config.to_yaml`)

    @property
    def metrics(self) -> Path:
        return self.root / "metrics.jsonl"  # one row per step and per eval

    @property
    def distributions(self) -> Path:
        return self.root / "distributions.jsonl"  # per-step histograms (rlvr.metrics)

    @property
    def plan(self) -> Path:
        return self.root / "plan.json"  # `rlvr plan`'s prediction, which the report compares

    @property
    def checkpoints(self) -> Path:
        return self.root / "checkpoints"  # model checkpoints, one step_NNNNNN folder each

    def checkpoint(self, step: int) -> Path:
        return self.checkpoints / f"step_{step:06d}"

    @property
    def final(self) -> Path:
        return self.root / "final"  # the trained model, written once at the end

    @property
    def state(self) -> Path:
        return self.root / "state"  # training states (checkpoint.checkpoint_state_dir's default)

    @property
    def traces(self) -> Path:
        return self.root / "traces"  # per-sample Parquet traces of training steps

    @property
    def eval_traces(self) -> Path:
        return self.traces / "eval"

    @property
    def tensorboard(self) -> Path:
        return self.root / "tensorboard"

    @property
    def weight_updates(self) -> Path:
        return self.root / "weight_updates"  # weights handed to engines by disk

    @property
    def server_key(self) -> Path:
        return self.root / "server.key"  # the run's server key (rlvr.serving.auth), 0600

    @property
    def ranks(self) -> Path:
        return self.root / "ranks"  # the local launcher's per-rank logs and config

    @property
    def slurm(self) -> Path:
        return self.root / "slurm"  # the Slurm job's script, config, logs and exit code
