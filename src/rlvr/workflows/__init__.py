"""Rollout workflows: an episode is an async function that may call the engine many times.

- `base`: the `Trajectory` record, the `EpisodeContext` an episode uses, the registry;
- `runner`: runs a step's episodes concurrently and turns trajectories into scored groups;
- `single_turn`, `multi_turn`, `tool_use`: the built-in workflows (`rollout.workflow`);
- `tools`: the Python tool of `tool_use`: finding a call in a turn, running it in the sandbox.
"""

from rlvr.workflows import multi_turn, single_turn, tool_use  # noqa: F401  (registration)
from rlvr.workflows.base import (WORKFLOWS, EpisodeContext, Trajectory, TrajectoryBuilder,
                                 WorkflowSettings, gather_samples, get_workflow,
                                 is_known_workflow, register_workflow)
from rlvr.workflows.runner import EpisodeRunner

__all__ = ["WORKFLOWS", "EpisodeContext", "EpisodeRunner", "Trajectory", "TrajectoryBuilder",
           "WorkflowSettings", "gather_samples", "get_workflow", "is_known_workflow",
           "register_workflow"]
