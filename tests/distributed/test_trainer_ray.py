"""The training loop on Ray: the tiny config with 2 FSDP2 learner actors, 1 engine actor and the
data-preparation actor, 3 steps, against the same config in one process (same seed, so the same
batches). Weights reach the engine actor by broadcast from learner rank 0, so matching rewards at
steps 2 and 3 also show the engine sampled from the updated weights. Then exact resume of that
layout, and vLLM in an engine actor."""

from __future__ import annotations

import pytest
import torch

from rlvr.config import load_config
from rlvr.run.loop import train

pytestmark = pytest.mark.slow  # whole training runs on Ray: `make test-slow` (docs/testing.md)

OVERRIDES = ["algorithm.filter_zero_std_samples=false", "eval.local_eval_every=0",
             "logging.progress_bar=false", "checkpoint.save_freq=0", "model.num_threads=1"]
ACTORS = ["distributed.launcher=ray", "distributed.num_learners_per_node=[2]",
          "distributed.sharding=fsdp", "distributed.collective_timeout_s=60",
          "rollout.num_engines=1", "distributed.data_prep_actor=true"]


def _steps(run) -> list[dict]:
    return [r for r in run.history if r["training_step"] > 0]


def _final_weights(out) -> dict[str, torch.Tensor]:
    from safetensors.torch import load_file

    return load_file(str(out / "final" / "model.safetensors"))


def test_two_fsdp_learner_actors_and_an_engine_actor_match_one_process(tmp_path, ray_session):
    local = train(load_config("configs/tiny.yaml", [
        f"experiment.output_dir={tmp_path / 'local'}", *OVERRIDES]))
    ray_run = train(load_config("configs/tiny.yaml", [
        f"experiment.output_dir={tmp_path / 'ray'}", *OVERRIDES, *ACTORS]))
    assert len(_steps(ray_run)) == len(_steps(local)) == 3
    for mine, ref in zip(_steps(ray_run), _steps(local)):
        assert mine["episode"] == ref["episode"]
        for key in ("loss/policy_avg", "loss/kl_avg", "policy/entropy_avg", "optim/grad_norm",
                    "objective/verifiable_reward"):
            if key in ref:
                assert mine[key] == pytest.approx(ref[key], rel=1e-4, abs=1e-6), key
        # The engine actor's logprobs are the learners' for the same tokens: it had the weights.
        assert mine["debug/engine_vs_local_logprob_diff_max"] < 1e-4
    # The driver's copy (refreshed from rank 0 to save) equals one process's weights.
    ours, theirs = _final_weights(tmp_path / "ray"), _final_weights(tmp_path / "local")
    assert ours.keys() == theirs.keys()
    for name in theirs:
        torch.testing.assert_close(ours[name], theirs[name], atol=1e-5, rtol=1e-4)


def test_learner_actors_resume_exactly_from_their_training_state(tmp_path, ray_session):
    """Steps 1-3 in one go, against steps 1-2, a stop, and a rerun that resumes at step 3:
    optimizer state of both FSDP2 ranks, the mixer's position in the data actor, and the RNGs
    come back, so step 3 and the final weights are the same."""
    common = [*OVERRIDES, *ACTORS, "checkpoint.checkpoint_state_freq=1",
              "optimizer.lr_scheduler_type=constant"]
    whole = train(load_config("configs/tiny.yaml", [
        f"experiment.output_dir={tmp_path / 'whole'}", *common]))
    split = tmp_path / "split"
    train(load_config("configs/tiny.yaml", [f"experiment.output_dir={split}", *common,
                                            "experiment.total_episodes=32"]))
    resumed = train(load_config("configs/tiny.yaml", [f"experiment.output_dir={split}",
                                                      *common]))
    assert resumed.start_step == 2
    [mine], ref = _steps(resumed), _steps(whole)[-1]
    assert mine["training_step"] == 3 and mine["episode"] == ref["episode"]
    for key in ("loss/policy_avg", "policy/entropy_avg", "optim/grad_norm",
                "objective/verifiable_reward"):
        assert mine[key] == pytest.approx(ref[key], rel=1e-5, abs=1e-7), key
    ours, theirs = _final_weights(split), _final_weights(tmp_path / "whole")
    for name in theirs:
        torch.testing.assert_close(ours[name], theirs[name], atol=1e-6, rtol=1e-5)


def test_vllm_engine_actor_takes_weights_broadcast_from_learner_rank_0(tmp_path, ray_session):
    """vLLM in an actor of its own, 2 FSDP2 learners: synchronous steps sample from the weights
    just broadcast, so the learners recompute the engine's logprobs exactly at every step."""
    from rlvr.rollout.vllm.engine import INSTALL_HINT, vllm_available

    if not vllm_available():
        pytest.skip(f"vLLM is not installed: {INSTALL_HINT}")
    run = train(load_config("configs/tiny.yaml", [
        f"experiment.output_dir={tmp_path}", *OVERRIDES, "distributed.launcher=ray",
        "distributed.num_learners_per_node=[2]", "distributed.collective_timeout_s=120",
        "rollout.engine=vllm", "rollout.num_engines=1", "rollout.vllm.kv_cache_gb=0.05",
        "rollout.vllm.max_model_len=256"]))
    steps = [r for r in run.history if r["training_step"] > 0]
    assert len(steps) == 3
    for r in steps:
        assert r["debug/engine_vs_local_logprob_diff_max"] < 1e-4, r["training_step"]
        assert r["time/weight_sync"] > 0
