"""The local launcher's side of several learners, without starting any: the environment a rank
reads, the layouts it refuses, and where servers go when the learners keep the first GPUs.
(Runs of real ranks: tests/distributed/test_local_ranks.py.)"""

from __future__ import annotations

from pathlib import Path

import pytest

from rlvr.config import ConfigError, load_config
from rlvr.distributed.ranks import RankEnv, RankFailure

ROOT = Path(__file__).resolve().parents[2]
TINY = str(ROOT / "configs" / "tiny.yaml")


def test_a_rank_reads_torchruns_environment():
    env = {"RANK": "1", "WORLD_SIZE": "2", "LOCAL_RANK": "1", "MASTER_ADDR": "10.0.0.1",
           "MASTER_PORT": "29500"}
    rank = RankEnv.from_environ(env)
    assert rank == RankEnv(1, 2, 1, "10.0.0.1", 29500)
    assert RankEnv.from_environ(rank.to_environ()) == rank  # what the launcher gives back
    assert RankEnv.from_environ({}) is None  # not started as a rank: one process
    assert RankEnv.from_environ({**env, "WORLD_SIZE": "1"}) is None  # torchrun of one
    with pytest.raises(RankFailure, match="MASTER_ADDR"):
        RankEnv.from_environ({"RANK": "0", "WORLD_SIZE": "2"})


def test_the_local_launcher_starts_one_machines_ranks_only(tmp_path):
    from rlvr.launch.local_ranks import LocalRanks

    cfg = load_config(TINY, [f"experiment.output_dir={tmp_path}",
                             "distributed.num_learners_per_node=[1,1]"])
    with pytest.raises(ConfigError, match="torchrun on each node"):
        LocalRanks(cfg)


def test_servers_take_the_gpus_after_the_learner_ranks(monkeypatch, tmp_path):
    """On a GPU machine rank r keeps GPU r; each server gets tensor_parallel GPUs after them."""
    import rlvr.device
    import rlvr.launch.servers
    from rlvr.launch.run import _start_servers

    started = {}
    monkeypatch.setattr(rlvr.device, "resolve_device",
                        lambda *a, **k: rlvr.device.Device("cuda", 0, bf16_native=True))
    monkeypatch.setattr(rlvr.launch.servers, "LocalServers",
                        lambda *a, **k: started.setdefault("visible", k["visible_devices"]))
    cfg = load_config(TINY, [f"experiment.output_dir={tmp_path}", "rollout.engine=remote",
                             "distributed.num_learners_per_node=[3]", "rollout.num_servers=2",
                             "rollout.tensor_parallel_size=2"])
    _start_servers(cfg)
    assert started["visible"] == ["3,4", "5,6"]
