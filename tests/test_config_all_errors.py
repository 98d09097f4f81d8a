"""Every config error at once: unknown keys, wrong types, ranges and bad combinations, from the
files and the overrides, in one ConfigError (exit 2). The merge stopped at the first value it
could not take, so `rollout.nope=1 optimizer.nope=2` named only rollout.nope and
`rollout.temperature=abc optimizer.max_grad_norm=-1` only the temperature."""

from __future__ import annotations

import pytest

from rlvr.cli import main
from rlvr.config import ConfigError, load_config


def _problems(*overrides, files=("configs/tiny.yaml",)):
    with pytest.raises(ConfigError) as refused:
        load_config(list(files), list(overrides))
    return str(refused.value)


def test_every_unknown_key_and_wrong_type_of_the_overrides_is_named():
    message = _problems("rollout.nope=1", "optimizer.nope=2")
    assert message.startswith("invalid config:\n  - ")
    assert "'rollout.nope' in the command-line overrides: Key 'nope' not in" in message
    assert "'optimizer.nope' in the command-line overrides: Key 'nope' not in" in message


def test_a_wrong_type_does_not_hide_a_range_or_a_combination():
    message = _problems("rollout.temperature=abc", "optimizer.max_grad_norm=-1",
                        "algorithm.pack_length=64")
    assert "'rollout.temperature' in the command-line overrides: Value 'abc'" in message
    assert "optimizer.max_grad_norm=-1.0 must be > 0" in message
    assert "algorithm.pack_length=64 is shorter than data.max_prompt_length" in message
    # One problem alone keeps its one line, as before.
    assert _problems("rollout.nope=1") == ("config field 'rollout.nope' in the command-line "
                                           "overrides: Key 'nope' not in 'RolloutConfig'")


def test_every_bad_value_of_a_file_is_named(tmp_path, capsys):
    bad = tmp_path / "bad.yaml"
    bad.write_text("rollout:\n  nope: 1\n  temperature: warm\noptimizer:\n  max_grad_norm: -1\n")
    message = _problems(files=("configs/tiny.yaml", str(bad)))
    assert f"'rollout.nope' in {bad}" in message
    assert f"'rollout.temperature' in {bad}" in message
    assert "optimizer.max_grad_norm=-1.0 must be > 0" in message
    assert main(["config", "configs/tiny.yaml", str(bad), "eval.nope=3"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n  - ") == 4 and "'eval.nope' in the command-line overrides" in err
