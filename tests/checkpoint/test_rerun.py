"""A rerun's config against the one its directory remembers (`rlvr.checkpoint.rerun`): another
config is another run, refused naming every changed field; a longer run continues; a
directory that holds nothing trained takes any config."""

from __future__ import annotations

import pytest

from rlvr.checkpoint.rerun import check_rerun, config_changes
from rlvr.config import load_config, to_yaml
from rlvr.run.errors import ResumeRefused


def _yaml(*overrides):
    return to_yaml(load_config("configs/tiny.yaml", list(overrides)))


def test_changed_fields_are_named_with_both_values_and_a_longer_run_is_the_same_run():
    old = _yaml()
    assert config_changes(old, _yaml()) == []
    assert config_changes(old, _yaml("optimizer.learning_rate=1e-4", "experiment.seed=3")) == [
        ("experiment.seed", 1, 3), ("optimizer.learning_rate", 1e-3, 1e-4)]
    assert config_changes(old, _yaml("experiment.total_episodes=96")) == []  # longer: continues
    assert config_changes(old, _yaml("experiment.total_episodes=32")) == [
        ("experiment.total_episodes", 48, 32)]
    # Where the run is, whether it resumes and how its console looks do not make another run.
    assert config_changes(old, _yaml("experiment.output_dir=/elsewhere", "checkpoint.resume=false",
                                     "logging.progress_bar=false")) == []


def test_a_rerun_of_another_config_is_refused_naming_the_fields_and_the_ways_on(tmp_path):
    (tmp_path / "config.yaml").write_text(_yaml())
    new = _yaml("optimizer.learning_rate=1e-4", "rollout.temperature=0.7")
    check_rerun(tmp_path, tmp_path / "state", new)  # nothing trained: any config starts here
    (tmp_path / "metrics.jsonl").write_text('{"training_step": 0}\n{"training_step": 2}\n')
    with pytest.raises(ResumeRefused) as refused:
        check_rerun(tmp_path, tmp_path / "state", new)
    message = str(refused.value)
    assert f"{tmp_path} holds an earlier run (its metrics reach step 2) of another config" in message
    assert "optimizer.learning_rate: 0.001 -> 0.0001; rollout.temperature: 1.0 -> 0.7" in message
    assert f"with that run's config ({tmp_path / 'config.yaml'})" in message
    assert "rlvr train --overwrite (checkpoint.resume=false)" in message
    assert f"aside to {tmp_path}.old-1" in message
    check_rerun(tmp_path, tmp_path / "state", _yaml("experiment.total_episodes=96"))
    (tmp_path / "config.yaml").unlink()  # a run of an rlvr that wrote none: not compared
    check_rerun(tmp_path, tmp_path / "state", new)
