"""A Ray node lost mid-run, on raylets of this one machine (`ray.cluster_utils.Cluster`, as
test_two_nodes.py): a node holding only engines, and the run goes on with the engines left and
takes one back when a node joins; a node holding the learner, and the run stops with its last
state saved, and the same command on a fresh node resumes exactly (issue 53, item 1).

Placement is made by the order nodes join: the head has no CPU, so the learner goes to the one
node there is, and the engine nodes join once its placement group holds that node's CPU. Each
test prints the times it measured (detect, recover), the figures of docs/ray-and-slurm.md.
"""

from __future__ import annotations

import json
import logging
import os
import threading
import time
from pathlib import Path

import pytest

from rlvr.config import load_config
from rlvr.run.errors import LearnerLost
from rlvr.run.loop import train
from tests.kill_and_resume import metrics as run_metrics, same_final_weights

pytestmark = pytest.mark.slow

SMALL = {"num_cpus": 1, "object_store_memory": 100 * 2**20}


@pytest.fixture(scope="module")
def ray_nodes():
    """A head with no CPU (nothing is placed there: every actor is on a node a test adds and may
    remove); each test adds its nodes and removes them at its end."""
    ray = pytest.importorskip("ray", reason="Ray is not importable (pip install 'ray==2.60.*')",
                              exc_type=ImportError)
    from ray.cluster_utils import Cluster

    os.environ.setdefault("RAY_AUTH_MODE", "disabled")
    cluster = Cluster(initialize_head=True, head_node_args={
        "num_cpus": 0, "object_store_memory": 100 * 2**20, "include_dashboard": False})
    ray.init(address=cluster.address, log_to_driver=False)
    yield cluster
    ray.shutdown()
    cluster.shutdown()


def _cfg(out: Path, steps: int, *extra: str):
    return load_config("configs/tiny.yaml", [
        f"experiment.output_dir={out}", f"experiment.total_episodes={16 * steps}",
        "logging.progress_bar=false", "eval.local_eval_every=0",
        "algorithm.filter_zero_std_samples=false", "checkpoint.save_freq=0",
        "checkpoint.checkpoint_state_freq=1", "distributed.launcher=ray",
        "rollout.engine=transformers", "rollout.num_engines=2",
        "distributed.collective_timeout_s=45", *extra])


def _wait(what: str, ready, timeout_s: float = 120.0) -> float:
    """Poll `ready()` until true; the wall time it became so."""
    deadline = time.monotonic() + timeout_s
    while not ready():
        if time.monotonic() > deadline:
            raise TimeoutError(f"waited {timeout_s:.0f} s for {what}")
        time.sleep(0.05)
    return time.time()


def _rows(out: Path) -> list[dict]:
    path = out / "metrics.jsonl"
    if not path.exists():
        return []
    return [json.loads(line) for line in path.read_text().splitlines() if line.endswith("}")]


def _learner_placed() -> bool:
    """The learner's placement group holds the only node's CPU."""
    import ray

    return ray.available_resources().get("CPU", 0) == 0


class _NoSignals:
    """`StopOnSignal` for a run in a thread (signal handlers belong to the main thread, which
    adds and kills the nodes here: Ray's `Cluster.add_node` sets one itself)."""

    signum = None

    def __enter__(self) -> "_NoSignals":
        return self

    def __exit__(self, *exc: object) -> None:
        pass


def _train_in_thread(cfg, monkeypatch) -> tuple[threading.Thread, dict]:
    """`train(cfg)` in a thread; its run, or its error, and when it ended go to the dict."""
    monkeypatch.setattr("rlvr.run.loop.StopOnSignal", _NoSignals)
    box: dict = {}

    def body() -> None:
        try:
            box["run"] = train(cfg)
        except BaseException as e:  # noqa: BLE001  the test reads it
            box["error"] = e
        box["ended"] = time.time()

    thread = threading.Thread(target=body, daemon=True)
    thread.start()
    return thread, box


def _learner_then_engines(cluster, engine_cpus: list[int], nodes: list) -> None:
    """With the run started: once its learner holds the one node there is, add engine nodes
    (CPUs of each), so the engines go there and nowhere else."""
    _wait("the learner's placement", _learner_placed)
    for cpus in engine_cpus:
        nodes.append(cluster.add_node(**{**SMALL, "num_cpus": cpus}))


def _add_learner_node(cluster, nodes: list) -> None:
    nodes.append(cluster.add_node(**SMALL))
    cluster.wait_for_nodes()


def _remove_nodes(cluster, nodes: list) -> None:
    for node in nodes:
        if node in cluster.worker_nodes:
            cluster.remove_node(node, allow_graceful=False)


def test_an_engine_node_lost_and_rejoined_the_run_goes_on(tmp_path, ray_nodes, caplog,
                                                          monkeypatch):
    """Engines on two nodes of one CPU each; after step 1 one engine node is killed, and once the
    loss is recorded a fresh node joins. Every step trains; the records show the loss and the
    engine taken back; one warning names the lost node. The lost work was redone with its own
    seeds: every record but the engines' counts and the times is an undisturbed run's."""
    cluster, out, nodes, times = ray_nodes, tmp_path / "run", [], {}
    reference = tmp_path / "reference"
    try:
        _add_learner_node(cluster, nodes)
        thread, box = _train_in_thread(_cfg(reference, 8), monkeypatch)
        _learner_then_engines(cluster, [1, 1], nodes)
        thread.join(timeout=600)
        assert "error" not in box, repr(box.get("error"))
    finally:
        _remove_nodes(cluster, nodes)
    nodes = []
    caplog.set_level(logging.WARNING, logger="rlvr.distributed")
    _add_learner_node(cluster, nodes)
    thread, box = _train_in_thread(_cfg(out, 8), monkeypatch)
    try:
        _learner_then_engines(cluster, [1, 1], nodes)
        _wait("step 1", lambda: any(r["training_step"] == 1 for r in _rows(out)), 300)
        times["removed"] = time.time()
        cluster.remove_node(nodes[2], allow_graceful=False)
        _wait("the loss in a record", lambda: any(
            r.get("engines/lost_total") for r in _rows(out)) or "ended" in box, 300)
        times["added"] = time.time()
        nodes.append(cluster.add_node(**SMALL))
        thread.join(timeout=600)
    finally:
        _remove_nodes(cluster, nodes)
    assert "error" not in box, repr(box.get("error"))
    steps = [r for r in box["run"].history if r["training_step"] > 0]
    assert [r["training_step"] for r in steps] == list(range(1, 9))  # every step trained
    assert all(r["optim/num_optimizer_steps"] >= 1 for r in steps)
    last = steps[-1]
    assert last["engines/lost_total"] == 1 and last["engines/joined_total"] == 1, last
    assert last["engines/live"] == 2
    assert any(r["engines/live"] == 1 for r in steps)  # generation on the one engine left
    lost = [r for r in caplog.records if "was lost during" in r.getMessage()]
    assert len(lost) == 1 and "node " in lost[0].getMessage(), [r.getMessage() for r in lost]
    joined = [r for r in caplog.records if "started on node" in r.getMessage()]
    assert len(joined) == 1

    def undisturbed(rows: list[dict]) -> list[dict]:
        return [{k: v for k, v in r.items() if not k.startswith("engines/")} for r in rows]

    assert undisturbed(run_metrics(out)) == undisturbed(run_metrics(reference))
    print(f"\nengine node lost: detected {lost[0].created - times['removed']:.1f} s after the "
          f"node was killed ({lost[0].getMessage()}); an engine back "
          f"{joined[0].created - times['added']:.1f} s after a node joined; run finished "
          f"{box['ended'] - times['removed']:.1f} s after the loss")


def test_a_learner_node_lost_stops_clean_and_the_same_command_resumes_exactly(
        tmp_path, ray_nodes, monkeypatch):
    """The learner's node is killed once step 2's state is saved: the run stops with
    `LearnerLost` (exit 8), naming the node and the state; the same command, with the learner
    on a fresh node, ends with the metrics and weights of an uninterrupted run."""
    cluster, steps = ray_nodes, 4
    reference, out = tmp_path / "reference", tmp_path / "run"
    nodes: list = []
    try:
        _add_learner_node(cluster, nodes)
        thread, box = _train_in_thread(_cfg(reference, steps), monkeypatch)
        _learner_then_engines(cluster, [2], nodes)
        thread.join(timeout=600)
        assert "error" not in box, repr(box.get("error"))
        _remove_nodes(cluster, nodes)

        nodes = []
        _add_learner_node(cluster, nodes)
        thread, box = _train_in_thread(_cfg(out, steps), monkeypatch)
        _learner_then_engines(cluster, [2], nodes)
        _wait("step 2's state", lambda: (out / "state" / "step_000002").exists(), 300)
        removed = time.time()
        cluster.remove_node(nodes[0], allow_graceful=False)  # the learner's
        thread.join(timeout=600)
        assert isinstance(box.get("error"), LearnerLost), repr(box.get("error"))
        message = str(box["error"])
        assert "\n" not in message
        assert "learner rank 0 ran on node" in message and "which Ray reports dead" in message
        assert "step_000002" in message, message

        # The same command with the learner on a fresh node: resumes from step 2.
        _add_learner_node(cluster, nodes)
        started = time.time()
        thread, again = _train_in_thread(_cfg(out, steps), monkeypatch)
        thread.join(timeout=600)
        assert "error" not in again, repr(again.get("error"))
    finally:
        _remove_nodes(cluster, nodes)
    assert run_metrics(out) == run_metrics(reference)
    assert same_final_weights(out, reference)
    print(f"\nlearner node lost: stopped {box['ended'] - removed:.1f} s after the node was "
          f"killed ({message[:400]}); the rerun finished in {again['ended'] - started:.1f} s")
