"""Learners placed across two Ray nodes: the same steps the README gives for two machines, on
two raylets of this one machine (`ray.cluster_utils.Cluster`), so STRICT_SPREAD placement, the
cross-node rendezvous and the weight broadcast run as they would between hosts."""

from __future__ import annotations

import os

import pytest

from rlvr.config import load_config
from rlvr.run.loop import train


@pytest.fixture(scope="module")
def two_nodes():
    ray = pytest.importorskip("ray", reason="Ray is not importable (pip install 'ray==2.60.*')",
                              exc_type=ImportError)
    from ray.cluster_utils import Cluster

    os.environ.setdefault("RAY_AUTH_MODE", "disabled")
    small = {"num_cpus": 2, "object_store_memory": 100 * 2**20}
    cluster = Cluster(initialize_head=True,
                      head_node_args={**small, "include_dashboard": False})
    cluster.add_node(**small)
    cluster.wait_for_nodes()
    ray.init(address=cluster.address, log_to_driver=False)
    yield cluster
    ray.shutdown()
    cluster.shutdown()


@pytest.mark.slow
def test_one_learner_per_node_trains_with_an_engine_actor(tmp_path, two_nodes):
    run = train(load_config("configs/tiny.yaml", [
        f"experiment.output_dir={tmp_path}", "logging.progress_bar=false",
        "eval.local_eval_every=0", "algorithm.filter_zero_std_samples=false",
        "distributed.launcher=ray",
        "distributed.num_learners_per_node=[1,1]", "distributed.collective_timeout_s=60",
        "rollout.num_engines=1"]))
    nodes = run.learner.group.rank_nodes
    assert len(nodes) == 2 and len(set(nodes)) == 2, nodes  # one rank on each node
    steps = [r for r in run.history if r["training_step"] > 0]
    assert len(steps) == 3 and all(r["debug/engine_vs_local_logprob_diff_max"] < 1e-4
                                   for r in steps)
