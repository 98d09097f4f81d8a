"""Learner and engine actors ask Ray for the GPUs a GPU run needs and receive them, on a
cluster that declares GPUs it does not have (`ray.init(num_gpus=4)`); compute is forced to
CPU (`device="cpu"`), so the placement logic is what runs on a GPU cluster, minus the kernels.
A run whose GPU count the cluster lacks fails at start, naming both."""

from __future__ import annotations

import os

import pytest

from rlvr.run.build import build_run, plan_devices
from rlvr.config import ConfigError, load_config
from rlvr.distributed.engine_group import EngineGroup
from rlvr.distributed.learner_group import LearnerGroup
from rlvr.rollout.base import EngineSettings
from tests.distributed.test_learner_group import _batch, _params, _spec

TINY = os.path.join(os.path.dirname(__file__), "..", "..", "configs", "tiny.yaml")


@pytest.fixture(scope="module")
def fake_gpu_cluster():
    ray = pytest.importorskip("ray", exc_type=ImportError)
    os.environ.setdefault("RAY_AUTH_MODE", "disabled")
    ray.init(num_cpus=4, num_gpus=4, include_dashboard=False, object_store_memory=128 * 2**20,
             log_to_driver=False)
    yield ray
    ray.shutdown()


def test_learner_ranks_each_get_one_gpu_and_still_train(fake_gpu_cluster, tiny_model_dir):
    spec = _spec(tiny_model_dir, sharding="fsdp", device="cpu", timeout_s=60)
    with LearnerGroup(spec, 2, backend="ray", gpus_per_learner=1) as pair:
        got = pair.rank_resources
        gpu_ids = [r["gpu_ids"] for r in got]
        assert all(len(ids.split(",")) == 1 for ids in gpu_ids), got
        assert len(set(gpu_ids)) == 2, f"two ranks share a GPU: {got}"
        # Ray hides the other GPUs from each rank: what CUDA would number 0 is its own.
        assert [r["cuda_visible_devices"] for r in got] == gpu_ids
        assert [r["device"] for r in got] == ["cpu", "cpu"]
        batch = _batch(4, seed=1)
        result = pair.update(batch, "dapo", _params(batch, beta=0.0), 2, 1, 1.0)
        assert result.num_response_tokens == batch.num_response_tokens
        assert "memory/rss_gb" in result.memory


def test_engine_actors_get_their_tensor_parallel_gpus(fake_gpu_cluster, tiny_model_dir,
                                                      tiny_tokenizer):
    group = EngineGroup(1, "transformers", tiny_model_dir, EngineSettings(device="cpu"),
                        (tiny_tokenizer.eos_token_id,), tiny_tokenizer.pad_token_id,
                        num_threads=1, gpus_per_engine=2)
    try:
        (got,) = group.resources()
        assert len(got["gpu_ids"].split(",")) == 2, got
        assert got["cuda_visible_devices"] == got["gpu_ids"]
    finally:
        group.close()


def test_the_plan_asks_one_gpu_per_learner_and_tp_per_engine(fake_gpu_cluster):
    cfg = load_config(TINY, ["distributed.launcher=ray", "distributed.num_learners_per_node=[2]",
                             "rollout.num_engines=1", "rollout.engine=vllm",
                             "rollout.tensor_parallel_size=2",
                             "rollout.vllm.max_model_len=256"])
    plan = plan_devices(cfg, cluster_gpus=4.0)
    assert (plan.type, plan.bf16, plan.gpus_per_learner, plan.gpus_per_engine) == (
        "cuda", True, 1, 2)
    assert plan_devices(cfg, cluster_gpus=0.0).type == "cpu"  # auto on a CPU cluster


def test_a_cluster_short_of_gpus_fails_at_start_naming_both(fake_gpu_cluster, tmp_path):
    cfg = load_config(TINY, ["distributed.launcher=ray", "distributed.num_learners_per_node=[2]",
                             "rollout.num_engines=3", "rollout.engine=transformers",
                             "model.device=cuda", f"experiment.output_dir={tmp_path}"])
    with pytest.raises(ConfigError, match=r"needs 5 GPUs .* the Ray cluster has 4"):
        build_run(cfg)


def test_fsdp_mixed_precision_of_gpu_runs_works_over_gloo(fake_gpu_cluster, tiny_model_dir):
    """GPU runs shard with bf16 compute and fp32 master weights and gradient reduction (FSDP2
    MixedPrecisionPolicy). The same code runs over gloo here: the update's loss is the fp32
    one within bf16 rounding, and the weights stay fp32."""
    import dataclasses

    spec = _spec(tiny_model_dir, sharding="fsdp", device="cpu", timeout_s=60)
    bf16 = dataclasses.replace(spec, settings=dataclasses.replace(spec.settings,
                                                                  bf16_autocast=True))
    batch = _batch(4, seed=2)
    with LearnerGroup(spec, 2, backend="ray") as fp32, LearnerGroup(bf16, 2, backend="ray") as mp:
        want = fp32.update(batch, "dapo", _params(batch, beta=0.0), 2, 1, 1.0)
        got = mp.update(batch, "dapo", _params(batch, beta=0.0), 2, 1, 1.0)
        weights = dict(mp.named_weights())
    assert got.entropy_sum == pytest.approx(want.entropy_sum, rel=2e-2)
    assert got.grad_norm == pytest.approx(want.grad_norm, rel=5e-2)
    assert all(t.dtype == __import__("torch").float32 for t in weights.values())
