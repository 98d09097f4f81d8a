"""The issue's check: a loss (DAPO's terms, halved), a verifier and a workflow defined in a user's
plugin module train, under the Ray launcher with 2 learner actors and under the local launcher
with 2 learner ranks, each part running in the processes that need it (the marks it leaves
name their process ids). Before plugins reached other processes, the learner actors and ranks
could not find the loss by name, nor the verifier workers the verifier."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from rlvr.config import load_config
from tests.plugins.user_plugin import marks

ROOT = Path(__file__).resolve().parents[2]
TINY = str(ROOT / "configs" / "tiny.yaml")
# 2 steps of the tiny config, the plugin's parts named: by their registered names when the
# module is listed in experiment.plugins, or as 'module:name'.
QUICK = ["experiment.total_episodes=32", "algorithm.filter_zero_std_samples=false",
         "eval.local_eval_every=0", "logging.progress_bar=false", "checkpoint.save_freq=0",
         "model.num_threads=1", "model.bf16_autocast=false", "rewards.num_workers=1",
         "distributed.num_learners_per_node=[2]", "distributed.collective_timeout_s=60"]


def _named(module: str | None) -> list[str]:
    prefix = f"{module}:" if module else ""
    return [f"algorithm.loss_fn={prefix}halved_dapo", f"rollout.workflow={prefix}plugin_turn",
            f"rewards.remap_verifier.last_number={prefix}plugin_digits"]


@pytest.mark.slow
@pytest.mark.timeout(600)
def test_a_plugins_loss_verifier_and_workflow_train_on_ray_learner_actors(plugin, tmp_path,
                                                                          ray_session):
    """experiment.plugins reaches 2 Ray learner actors (the loss), the data-preparation actor
    (the workflow) and its verifier worker (the verifier); the engine is a Ray actor too."""
    from rlvr.run.loop import train

    run = train(load_config(TINY, [*QUICK, *_named(None), f"experiment.plugins=[{plugin}]",
                                   f"experiment.output_dir={tmp_path / 'run'}",
                                   "distributed.launcher=ray", "rollout.num_engines=1",
                                   "distributed.data_prep_actor=true"]))
    assert [r["training_step"] for r in run.history if r["training_step"] > 0] == [1, 2]
    here = os.getpid()
    learners, workflows, verifiers = (marks(tmp_path, what) - {here}
                                      for what in ("loss", "workflow", "verifier"))
    assert len(learners) == 2, learners  # one process per learner actor
    assert workflows and not workflows & learners  # in the data-preparation actor
    assert verifiers and not verifiers & (learners | workflows)  # in its verifier worker


@pytest.mark.slow
@pytest.mark.component
@pytest.mark.timeout(600)
def test_a_plugins_loss_verifier_and_workflow_train_on_local_learner_ranks(plugin, tmp_path):
    """`rlvr train` with 2 ranks under the local launcher, the parts named 'module:name' (no
    plugin list): rank 1, a child process started elsewhere's working directory would not
    see, finds the loss through the run's plugin path."""
    done = subprocess.run([sys.executable, "-m", "rlvr.cli", "train", TINY, *QUICK,
                           *_named(plugin), f"experiment.output_dir={tmp_path / 'run'}"],
                          cwd=tmp_path, capture_output=True, text=True, timeout=500)
    assert done.returncode == 0, done.stderr[-3000:]
    assert "learner ranks on hosts: 0:" in done.stderr
    learners, verifiers = marks(tmp_path, "loss"), marks(tmp_path, "verifier")
    assert len(learners) == 2, learners  # rank 0 (the trainer) and rank 1
    assert len(marks(tmp_path, "workflow")) == 1 and marks(tmp_path, "workflow") < learners
    assert verifiers and not verifiers & learners  # the trainer's verifier worker
