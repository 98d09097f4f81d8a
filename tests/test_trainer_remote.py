"""Training on inference servers (`rollout.engine=remote`), against fake servers: a run
carries on when one server dies, and stops with the addresses and its last good state saved
when none is left, never hanging."""

from __future__ import annotations

import pytest

from rlvr.config import load_config
from rlvr.run.errors import EngineLost
from rlvr.run.loop import train
from tests.serving.fake_server import running_servers


@pytest.fixture
def servers():
    with running_servers(2, vocab=250, tokens=6) as started:
        yield started


def _cfg(tmp_path, servers, steps: int = 4):
    addresses = "[" + ",".join(s.address for s in servers) + "]"
    return load_config("configs/tiny.yaml", [
        f"experiment.output_dir={tmp_path}", f"experiment.total_episodes={16 * steps}",
        "rollout.engine=remote", f"rollout.server_addresses={addresses}",
        # the fake servers' made-up logprobs would stop the run at the mismatch gate
        "health.enabled=false",
        "algorithm.filter_zero_std_samples=false", "eval.local_eval_every=0",
        "eval.eval_at_start=false", "checkpoint.save_final=false", "checkpoint.save_freq=0",
        "logging.progress_bar=false", "rewards.num_workers=0"])


def test_a_run_finishes_on_the_remaining_server(tmp_path, servers, caplog):
    servers[0].die_after = 1  # dies at its second request, in the first step
    run = train(_cfg(tmp_path, servers))
    steps = [h["training_step"] for h in run.history if h["training_step"] > 0]
    assert steps == [1, 2, 3, 4]
    assert f"inference server {servers[0].address} dropped" in caplog.text
    # Every update after the death went to the live server only.
    assert len(servers[1].reloaded) == 4 and len(servers[0].reloaded) == 0


def test_with_no_server_left_the_run_stops_naming_them_with_its_state_saved(tmp_path, servers):
    for s in servers:
        s.die_after = 5  # 4 requests a step, spread over both: they die in step 3
    with pytest.raises(EngineLost) as lost:
        train(_cfg(tmp_path, servers, steps=6))
    message = str(lost.value)
    assert all(s.address in message for s in servers)
    assert "training state of step" in message
    saved = sorted(p.name for p in (tmp_path / "state").iterdir() if p.name.startswith("step"))
    assert saved, "the last good state must be saved"


def test_servers_lost_during_an_eval_keep_that_steps_record_and_state(tmp_path, servers,
                                                                      monkeypatch):
    """The step trained and its weights reached the servers before its eval failed: the state
    saved is that step's, at the version the servers had, and its metrics are logged."""
    import json

    import rlvr.run.loop as trainer
    from rlvr.rollout.base import EngineUnavailable

    def eval_that_loses_the_servers(run, step):
        raise EngineUnavailable("no inference server is left (in the eval)")

    monkeypatch.setattr(trainer, "run_eval", eval_that_loses_the_servers)
    cfg = _cfg(tmp_path, servers, steps=4)
    cfg.eval.local_eval_every = 2
    with pytest.raises(EngineLost) as lost:
        train(cfg)
    assert "training state of step 2" in str(lost.value)
    saved = sorted(p.name for p in (tmp_path / "state").iterdir() if p.name.startswith("step"))
    assert saved[-1].endswith("2"), saved
    progress = json.loads((tmp_path / "state" / saved[-1] / "progress.json").read_text())
    assert progress["policy_version"] == 2  # synced twice, never bumped again
    logged = [json.loads(line)["training_step"]
              for line in (tmp_path / "metrics.jsonl").read_text().splitlines()]
    assert logged[-1] == 2
