"""The training loop with its learners as Ray actors: the tiny config, 2 FSDP2 ranks, 3 steps,
against the same config in one process (same seed, so the same batches)."""

from __future__ import annotations

import pytest
import torch

from rlvr.config import load_config
from rlvr.trainer import train

OVERRIDES = ["algorithm.filter_zero_std_samples=false", "eval.local_eval_every=0",
             "logging.progress_bar=false", "checkpoint.save_freq=0", "model.num_threads=1"]


def _final_weights(out) -> dict[str, torch.Tensor]:
    from safetensors.torch import load_file

    return load_file(str(out / "final" / "model.safetensors"))


def test_two_fsdp_learner_actors_match_one_process(tmp_path, ray_session):
    local = train(load_config("configs/tiny.yaml", [
        f"experiment.output_dir={tmp_path / 'local'}", *OVERRIDES]))
    ray_run = train(load_config("configs/tiny.yaml", [
        f"experiment.output_dir={tmp_path / 'ray'}", *OVERRIDES, "distributed.launcher=ray",
        "distributed.num_learners_per_node=[2]", "distributed.sharding=fsdp",
        "distributed.collective_timeout_s=60"]))
    steps = lambda run: [r for r in run.history if r["training_step"] > 0]  # noqa: E731
    assert len(steps(ray_run)) == len(steps(local)) == 3
    for mine, ref in zip(steps(ray_run), steps(local)):
        assert mine["episode"] == ref["episode"]
        for key in ("loss/policy_avg", "loss/kl_avg", "policy/entropy_avg", "optim/grad_norm",
                    "objective/verifiable_reward"):
            if key in ref:
                assert mine[key] == pytest.approx(ref[key], rel=1e-4, abs=1e-6), key
    # The driver's copy (what was saved and synced to the engine) equals one process's weights.
    ours, theirs = _final_weights(tmp_path / "ray"), _final_weights(tmp_path / "local")
    assert ours.keys() == theirs.keys()
    for name in theirs:
        torch.testing.assert_close(ours[name], theirs[name], atol=1e-5, rtol=1e-4)
