"""Values the config loader must refuse in one line naming the field, not as a traceback:
override and YAML values that OmegaConf hands to yaml, TypeError or OverflowError; numbers
inside a naive range that crash later (a seed numpy refuses, a timeout no clock holds, a
temperature whose inverse overflows, weights whose sum is infinite); an empty stop string; an
output directory that is empty or holds a NUL byte. And the warnings of settings that work but
do nothing (a warm-up longer than the run, an eval with no prompts)."""

from __future__ import annotations

import pytest

from rlvr.config import ConfigError, load_config, warnings_for

from tests.cli_checks import fails_in_one_line


_one_line = fails_in_one_line  # `rlvr ARGS` refused (exit 2) in one line naming the problem


@pytest.mark.parametrize("item, field", [
    ("rollout.stop_strings=[a,b", "rollout.stop_strings"),  # yaml ParserError
    ("rollout.workflow=:", "rollout.workflow"),  # yaml ParserError
    # A tag yaml's safe loader refuses: refused, in one line (never constructed)
    ("experiment.name=!!python/object/apply:os.system [x]", "experiment.name"),
    ("data.train.0.weight=2", "data.train"),  # TypeError: a mapping over a list
    ("experiment=3", "experiment"),  # OmegaConf names no field (full_key None)
    ("optimizer.learning_rate=1" + "0" * 400, "optimizer.learning_rate"),  # OverflowError
])
def test_a_bad_override_value_names_its_field_in_one_line(capsys, item, field):
    line = _one_line(capsys, ["config", "configs/tiny.yaml", item],
                     f"config field '{field}'", "in the command-line overrides")
    assert "'None'" not in line


def test_an_element_of_a_list_cannot_be_set_by_index_and_the_message_says_so():
    with pytest.raises(ConfigError, match=r"'data.train'.*a mapping where the config holds a "
                                          r"list; give the whole list"):
        load_config(None, ["data.train.0.weight=2"])


@pytest.mark.parametrize("text, field", [
    ("data:\n  train: {name: addition}\n", "data.train"),  # a mapping for a list
    ("rollout:\n  stop_strings: {a: 1}\n", "rollout.stop_strings"),
    ("experiment: 3\n", "experiment"),
    ("optimizer:\n  learning_rate: 1" + "0" * 400 + "\n", "optimizer.learning_rate"),
])
def test_a_bad_yaml_value_names_its_field_and_file(tmp_path, capsys, text, field):
    path = tmp_path / "c.yaml"
    path.write_text("model: {name_or_path: tiny-llama}\n" + text)
    _one_line(capsys, ["config", str(path)], f"config field '{field}' in {path}")


def test_an_override_after_a_bad_one_is_never_reached_and_good_ones_still_merge():
    cfg = load_config(None, ["rollout.stop_strings=[a, b]", "experiment.seed=7"])
    assert cfg.rollout.stop_strings == ["a", "b"] and cfg.experiment.seed == 7
    with pytest.raises(ConfigError, match="'rollout.stop_strings'"):
        load_config(None, ["experiment.seed=7", "rollout.stop_strings=[a,b"])


@pytest.mark.parametrize("item", ["experiment.total_episodes=1" + "0" * 400,
                                  "experiment.seed=1" + "0" * 400,
                                  "data.train=[{name: addition, max_rows: 1" + "0" * 400 + "}]"])
def test_an_integer_too_large_for_a_float_is_out_of_range(item):
    field = item.split("=")[0]
    with pytest.raises(ConfigError, match=f"{field}.*401 digits.* is too large"):
        load_config(None, [item])


@pytest.mark.parametrize("item, message", [
    # numpy: "Seed must be between 0 and 2**32 - 1", raised at start by seed_everything
    ("experiment.seed=4294967296", "experiment.seed=4294967296 must be in [0, 4294967295]"),
    # "OverflowError: timestamp too large" once a verifier ran, after the run dir was written
    ("rewards.timeout_s=1e10", "rewards.timeout_s=10000000000.0 must be in (0, 604800]"),
    ("rollout.tool_timeout_s=1e10", "rollout.tool_timeout_s"),
    ("rollout.episode_timeout_s=1e10", "rollout.episode_timeout_s"),
    ("rollout.server_request_timeout_s=1e10", "rollout.server_request_timeout_s"),
    ("rollout.server_startup_timeout_s=1e10", "rollout.server_startup_timeout_s"),
    ("distributed.collective_timeout_s=1e10", "distributed.collective_timeout_s"),
    # logits / 1e-320 are inf: NaN probabilities mid-run
    ("rollout.temperature=1e-320", "rollout.temperature=1e-320 must be >= 0.01"),
    ("eval.temperature=1e-320", "eval.temperature=1e-320 must be 0 or >= 0.01"),
])
def test_values_inside_the_old_ranges_that_crashed_later_are_refused(item, message):
    with pytest.raises(ConfigError) as e:
        load_config(None, [item])
    assert message in str(e.value)


def test_the_edges_of_the_new_ranges_are_accepted():
    cfg = load_config(None, ["experiment.seed=4294967295", "rewards.timeout_s=604800",
                             "rollout.temperature=0.01", "eval.temperature=0"])
    assert cfg.experiment.seed == 2**32 - 1


def test_a_judge_timeout_and_temperature_are_bounded_too():
    with pytest.raises(ConfigError) as e:
        load_config(None, ["rewards.judge={model: m, timeout_s: 1e10, temperature: 1e-9}"])
    assert "rewards.judge.timeout_s" in str(e.value)
    assert "rewards.judge.temperature" in str(e.value)


def test_source_weights_whose_sum_is_infinite_are_refused():
    with pytest.raises(ConfigError, match=r"data.train\[\].weight: the weights sum to inf"):
        load_config(None, ["data.train=[{name: addition, weight: 1e308}, "
                           "{name: addition, weight: 1e308, label: b}]"])


def test_an_empty_stop_string_is_refused():
    with pytest.raises(ConfigError, match=r"rollout.stop_strings\[1\] is empty"):
        load_config(None, ['rollout.stop_strings=["</answer>", ""]'])


def test_an_empty_output_dir_is_refused(tmp_path):
    path = tmp_path / "c.yaml"
    path.write_text('experiment: {output_dir: ""}\n')
    with pytest.raises(ConfigError, match="experiment.output_dir='' is empty"):
        load_config(path)


def test_a_nul_byte_in_a_directory_is_refused_naming_the_field(tmp_path):
    path = tmp_path / "c.yaml"
    path.write_text('experiment: {output_dir: "runs/a\\0b"}\n'
                    'checkpoint: {checkpoint_state_dir: "runs/s"}\n')
    with pytest.raises(ConfigError, match="experiment.output_dir=.*holds a NUL byte"):
        load_config(path)


def test_a_warm_up_as_long_as_the_run_warns():
    # 48 episodes of 4 x 4 samples: 3 steps, one optimizer step each
    short = ["experiment.total_episodes=48", "rollout.num_unique_prompts_rollout=4",
             "rollout.num_samples_per_prompt_rollout=4"]
    warned = warnings_for(load_config(None, [*short, "optimizer.warm_up_steps=3"]))
    assert any("optimizer.warm_up_steps=3 is not below the run's 3 optimizer steps" in w
               for w in warned), warned
    assert not any("warm_up" in w for w in warnings_for(
        load_config(None, [*short, "optimizer.warm_up_steps=2"])))


def test_an_eval_with_no_prompts_warns():
    warned = warnings_for(load_config(None, ["data.eval_holdout=0", "eval.local_eval_every=2"]))
    assert any("eval.local_eval_every=2" in w and "data.eval_holdout=0" in w for w in warned)
    for quiet in (["data.eval_holdout=0"], ["eval.local_eval_every=2"],
                  ["data.eval_holdout=0", "eval.local_eval_every=2",
                   "data.eval=[{name: addition}]"]):
        assert not any("local_eval_every" in w for w in warnings_for(load_config(None, quiet)))
