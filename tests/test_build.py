"""Building a run's parts: registry names are checked before anything loads."""

import pytest

from rlvr.run.input_checks import check_registered_names
from rlvr.cli import main
from rlvr.config import ConfigError, load_config


@pytest.mark.parametrize("overrides, field", [
    (["algorithm.loss_fn=ppo2"], "algorithm.loss_fn='ppo2'"),
    (["optimizer.lr_scheduler_type=exp"], "optimizer.lr_scheduler_type"),
    (["algorithm.advantage_normalization_type=zscore"], "algorithm.advantage_normalization_type"),
    (["rollout.engine=sglang"], "rollout.engine"),
    (["rewards.remap_verifier={math: nope}"], "rewards.remap_verifier.math='nope'"),
    (["rewards.reward_aggregator=mean"], "rewards.reward_aggregator"),
])
def test_unknown_registered_names_are_refused_naming_the_field(overrides, field):
    with pytest.raises(ConfigError, match=field.replace(".", r"\.")):
        check_registered_names(load_config(None, overrides))


def test_all_bad_names_are_reported_at_once_and_before_any_model_loads(tmp_path, capsys):
    code = main(["train", "configs/tiny.yaml", f"experiment.output_dir={tmp_path}",
                 "algorithm.loss_fn=ppo2", "rollout.engine=sglang",
                 "model.name_or_path=/nonexistent/model"])
    err = capsys.readouterr().err
    assert code == 2 and "algorithm.loss_fn" in err and "rollout.engine" in err
    assert not (tmp_path / "metrics.jsonl").exists()
