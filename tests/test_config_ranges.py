"""Every number of the config is checked once, against its range in `rlvr.config.ranges`:
finite, inside its bounds, every offender named at once. The schema walk keeps the table whole."""

import math

import pytest

from rlvr.cli import main
from rlvr.config import ConfigError, load_config
from rlvr.config.schema import Config

# `rlvr.config.ranges` is imported inside the tests, so the behaviour tests below also run
# (and fail) against code that predates it.


def test_every_numeric_field_of_the_schema_has_a_range():
    from rlvr.config.ranges import RANGES, numeric_fields

    fields = numeric_fields(Config)
    assert "optimizer.max_grad_norm" in fields and "data.train[].weight" in fields
    assert "rewards.judge.temperature" in fields  # a section that is null by default
    missing = [f for f in fields if f not in RANGES]
    assert not missing, f"numeric config fields without a range in rlvr.config.ranges: {missing}"


def test_every_range_names_a_field():
    from rlvr.config.ranges import RANGES, numeric_fields

    stray = sorted(set(RANGES) - set(numeric_fields(Config)))
    assert not stray, f"rlvr.config.ranges names no numeric field: {stray}"


def test_the_defaults_are_in_range():
    from rlvr.config.ranges import range_errors

    assert range_errors(Config()) == []


@pytest.mark.parametrize("bounds, text", [
    (dict(low=0, low_open=True), "> 0"), (dict(low=0), ">= 0"),
    (dict(low=0, high=1, high_open=True), "[0, 1)"), (dict(low=0, high=1, low_open=True),
                                                       "(0, 1]"),
    (dict(low=0, high=65535), "[0, 65535]"), (dict(low=1, also=(-1,)), "-1 or >= 1"),
    (dict(), "finite"), (dict(low=0.5), ">= 0.5"), (dict(high=2, high_open=True), "< 2")])
def test_a_range_reads_as_text(bounds, text):
    from rlvr.config.ranges import Range

    assert str(Range(**bounds)) == text


def test_a_range_admits_what_it_says():
    from rlvr.config.ranges import Range

    unit = Range(low=0, high=1, high_open=True)
    assert unit.admits(0) and unit.admits(0.5) and not unit.admits(1) and not unit.admits(-0.1)
    for bad in (math.nan, math.inf, -math.inf):
        assert not unit.admits(bad) and not Range().admits(bad)
    assert Range(finite=False).admits(math.inf) and not Range(finite=False).admits(math.nan)
    assert Range(low=1, also=(-1,)).admits(-1) and not Range(low=1, also=(-1,)).admits(0)
    assert not Range().admits(True)  # a bool is no number


@pytest.mark.parametrize("override, message", [
    # A negative clip norm reversed every gradient; 0 froze the model.
    ("optimizer.max_grad_norm=-1", "optimizer.max_grad_norm=-1.0 must be > 0"),
    ("optimizer.max_grad_norm=0", "optimizer.max_grad_norm=0.0 must be > 0"),
    ("optimizer.learning_rate=nan", "optimizer.learning_rate=nan must be > 0"),
    ("optimizer.learning_rate=inf", "optimizer.learning_rate=inf must be > 0"),
    ("rollout.temperature=nan", "rollout.temperature=nan must be >= 0.01"),
    ("algorithm.beta=nan", "algorithm.beta=nan must be >= 0"),
    ("algorithm.clip_lower=1.5", "algorithm.clip_lower=1.5 must be in [0, 1)"),
    ("optimizer.adam_beta1=2", "optimizer.adam_beta1=2.0 must be in [0, 1)"),
    ("optimizer.adam_beta2=-0.1", "optimizer.adam_beta2=-0.1 must be in [0, 1)"),
    ("optimizer.weight_decay=-1", "optimizer.weight_decay=-1.0 must be >= 0"),
    ("optimizer.adam_eps=0", "optimizer.adam_eps=0.0 must be > 0"),
    ("optimizer.warm_up_steps=-3", "optimizer.warm_up_steps=-3 must be >= 0"),
    ("algorithm.overlong_penalty_factor=-1", "algorithm.overlong_penalty_factor=-1.0 must be"),
    ("rollout.vllm.kv_cache_gb=0", "rollout.vllm.kv_cache_gb=0.0 must be > 0"),
    ("model.num_threads=-2", "model.num_threads=-2 must be >= 0"),
    ("experiment.seed=-1", "experiment.seed=-1 must be in [0, 4294967295]"),
    ("logging.peak_flops=nan", "logging.peak_flops=nan must be > 0"),
    ("rewards.r1_style_format_reward=nan", "rewards.r1_style_format_reward=nan"),
    ("algorithm.non_stop_penalty_value=-inf", "algorithm.non_stop_penalty_value=-inf must be "
                                              "finite"),
    ("checkpoint.keep_last_n_checkpoints=0", "checkpoint.keep_last_n_checkpoints=0 must be -1 "
                                             "or >= 1"),
    ("data.train=[{name: addition, weight: nan}]", "data.train[0].weight=nan must be > 0"),
    ("distributed.num_learners_per_node=[1,-1]", "distributed.num_learners_per_node[1]=-1"),
])
def test_a_number_out_of_its_range_is_refused(override, message):
    with pytest.raises(ConfigError) as e:
        load_config(None, [override])
    assert message in str(e.value)


def test_every_offender_is_named_once_and_together():
    with pytest.raises(ConfigError) as e:
        load_config(None, ["optimizer.max_grad_norm=-1", "optimizer.learning_rate=nan",
                           "algorithm.clip_lower=1.5", "rewards.judge={model: m}",
                           "rewards.judge.temperature=-1"])
    text = str(e.value)
    for name in ("optimizer.max_grad_norm", "optimizer.learning_rate", "algorithm.clip_lower",
                 "rewards.judge.temperature"):
        assert text.count(name + "=") == 1, text


def test_cli_refuses_a_nonsense_number_in_one_line_with_status_2(capsys):
    assert main(["config", "configs/tiny.yaml", "optimizer.max_grad_norm=-1"]) == 2
    err = capsys.readouterr().err
    assert "optimizer.max_grad_norm=-1.0 must be > 0" in err and "Traceback" not in err
