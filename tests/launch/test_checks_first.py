"""The local and Ray launchers check a run before they start anything for it: bad input, a
finished run and a refused resume start no server and no learner rank, and write no file of
the run directory (`server.key`, `servers/`, `ranks/`), as the Slurm launcher checks before it
submits. Fake servers stand in for vLLM (tests/serving/fake_server.py); the Ray launcher's
server actors are replaced by a recorder, so no Ray session starts."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

import rlvr.serving.server as server_module
from rlvr.cli import main
from rlvr.config import load_config
from rlvr.data import DataError
from rlvr.run.errors import ResumeRefused, RunFinished
from rlvr.launch import launch
from rlvr.launch.ray_servers import RayServers

ROOT = Path(__file__).resolve().parents[2]
FAKE = str(ROOT / "tests" / "serving" / "fake_server.py")
FINISHED_KEY = "the-finished-runs-key-0123456789abcdef"


@pytest.fixture
def started(monkeypatch) -> list:
    """Every server the local launcher starts (a fake server each) and every Ray server group
    entered (recorded, not started)."""
    monkeypatch.delenv("RLVR_LLM_SERVER_ADDRS", raising=False)
    monkeypatch.setattr(server_module, "server_command",
                        lambda s, python=sys.executable: [python, FAKE, "--port", str(s.port)])
    seen = []
    real_launch = server_module.ServerProcess.launch

    def recording_launch(self):
        seen.append(self.address)
        real_launch(self)

    def ray_servers_entered(self):
        seen.append("ray server actors")
        raise RuntimeError("the test starts no Ray server actors")

    monkeypatch.setattr(server_module.ServerProcess, "launch", recording_launch)
    monkeypatch.setattr(RayServers, "__enter__", ray_servers_entered)
    return seen


def _overrides(out: Path, *extra: str) -> list[str]:
    # 32 episodes of 16 samples: 2 steps
    return [f"experiment.output_dir={out}", "experiment.total_episodes=32",
            "rollout.engine=remote", "rollout.num_servers=2", "eval.local_eval_every=0",
            "eval.eval_at_start=false", "checkpoint.save_final=false",
            "logging.progress_bar=false", "rewards.num_workers=0", *extra]


def _finished_run(out: Path) -> None:
    """A run directory as a finished run leaves it: metrics up to its last step, its model,
    and its servers' key."""
    (out / "final").mkdir(parents=True)
    (out / "metrics.jsonl").write_text("".join(json.dumps({"training_step": s}) + "\n"
                                               for s in (1, 2)))
    (out / "server.key").write_text(FINISHED_KEY)
    (out / "server.key").chmod(0o600)


def test_a_missing_data_file_exits_2_before_any_server_starts(tmp_path, started, capsys):
    out = tmp_path / "run"
    code = main(["train", "configs/tiny.yaml",
                 *_overrides(out, f"data.train=[{{name: {tmp_path / 'missing.jsonl'}}}]")])
    assert code == 2
    assert "missing.jsonl: no such file" in capsys.readouterr().err
    assert started == []
    assert not out.exists()  # no server.key, no servers/ logs


def test_rerunning_a_finished_run_starts_no_server_and_keeps_its_key(tmp_path, started,
                                                                    capsys):
    out = tmp_path / "run"
    _finished_run(out)
    before = sorted(p.name for p in out.iterdir())
    assert main(["train", "configs/tiny.yaml", *_overrides(out)]) == 0
    assert "is finished" in capsys.readouterr().out
    assert started == []
    assert (out / "server.key").read_text() == FINISHED_KEY
    assert sorted(p.name for p in out.iterdir()) == before  # no servers/ either


def test_a_refused_resume_starts_no_server(tmp_path, started):
    """An earlier run's metrics without a state to continue from: refused (exit 2) first."""
    out = tmp_path / "run"
    out.mkdir()
    (out / "metrics.jsonl").write_text(json.dumps({"training_step": 1}) + "\n")
    with pytest.raises(ResumeRefused):
        launch(load_config("configs/tiny.yaml", _overrides(out)))
    assert started == []
    assert sorted(p.name for p in out.iterdir()) == ["metrics.jsonl"]


def test_bad_input_starts_no_learner_rank(tmp_path, started, monkeypatch):
    from rlvr.launch.local_ranks import LocalRanks

    def ranks_entered(self):
        started.append("learner ranks")
        raise RuntimeError("the test starts no learner ranks")

    monkeypatch.setattr(LocalRanks, "__enter__", ranks_entered)
    out = tmp_path / "run"
    cfg = load_config("configs/tiny.yaml", _overrides(
        out, "rollout.engine=transformers", "distributed.num_learners_per_node=[2]",
        f"data.train=[{{name: {tmp_path / 'missing.jsonl'}}}]"))
    with pytest.raises(DataError, match="no such file"):
        launch(cfg)
    assert started == [] and not out.exists()


def test_the_ray_launcher_checks_before_its_server_actors(tmp_path, started):
    bad = load_config("configs/tiny.yaml", _overrides(
        tmp_path / "bad", "distributed.launcher=ray",
        f"data.train=[{{name: {tmp_path / 'missing.jsonl'}}}]"))
    with pytest.raises(DataError, match="no such file"):
        launch(bad)
    finished = tmp_path / "finished"
    _finished_run(finished)
    with pytest.raises(RunFinished):
        launch(load_config("configs/tiny.yaml", _overrides(finished, "distributed.launcher=ray")))
    assert started == []
    assert not (tmp_path / "bad").exists()
    assert (finished / "server.key").read_text() == FINISHED_KEY


def test_servers_start_before_the_learner_ranks(tmp_path, monkeypatch):
    """The ranks' rendezvous deadline (distributed.collective_timeout_s) starts with them: a
    server start as slow as rollout.server_startup_timeout_s allows ran it out when the ranks
    came first."""
    import contextlib

    import rlvr.launch.run as run_module

    order = []

    @contextlib.contextmanager
    def servers(cfg):
        order.append("servers")
        yield type("Started", (), {"addresses": ["127.0.0.1:1"]})()

    @contextlib.contextmanager
    def ranks():
        order.append("ranks")
        yield

    monkeypatch.setattr(run_module, "_start_servers", servers)
    monkeypatch.setattr(run_module, "_learner_ranks", lambda cfg, env: ranks())
    monkeypatch.setattr("rlvr.run.loop.train", lambda cfg, start: order.append("train"))
    launch(load_config("configs/tiny.yaml", _overrides(tmp_path / "run")))
    assert order == ["servers", "ranks", "train"]
