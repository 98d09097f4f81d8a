"""Plugins without a run: `package.module:name` in every registry, `experiment.plugins` imported
(or refused naming the field), what reaches another process's environment, and the `__main__`
rule (docs/plugins.md)."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from rlvr.config import ConfigError, load_config
from rlvr.plugins import (PLUGIN_PATH_ENV, PLUGINS_ENV, check_main_entries,
                          import_from_environment, import_plugins)
from rlvr.registry import Registry
from rlvr.run.input_checks import check_registered_names

ROOT = Path(__file__).resolve().parents[2]
TINY = str(ROOT / "configs" / "tiny.yaml")


def _cfg(*overrides: str):
    return load_config(TINY, list(overrides))


def test_every_registry_takes_the_entry_a_module_registered(plugin):
    from rlvr.algorithm.advantages import ADVANTAGE_NORMALIZATIONS
    from rlvr.algorithm.losses import POLICY_LOSSES
    from rlvr.rewards.registry import VERIFIERS, get_verifier
    from rlvr.workflows import WORKFLOWS, get_workflow

    loss = POLICY_LOSSES.lookup(f"{plugin}:halved_dapo")  # imports the module
    module = sys.modules[plugin]
    assert loss is POLICY_LOSSES.lookup("halved_dapo")  # the record it registered, per included
    assert loss.terms is module.halved_dapo and loss.per == "token"
    assert ADVANTAGE_NORMALIZATIONS.lookup(f"{plugin}:plugin_centered") is module.plugin_centered
    assert WORKFLOWS.lookup(f"{plugin}:plugin_turn") is module.plugin_turn
    assert get_workflow(f"{plugin}:plugin_turn") is module.plugin_turn
    assert VERIFIERS.lookup(f"{plugin}:plugin_digits") is VERIFIERS.lookup("plugin_digits")
    assert get_verifier(f"{plugin}:plugin_digits") is module.plugin_digits
    # Stored under the full name: listed nowhere as a known name, and not imported again.
    assert f"{plugin}:halved_dapo" in POLICY_LOSSES
    assert f"{plugin}:halved_dapo" not in POLICY_LOSSES.names()


def test_an_engine_is_named_by_its_module_too(plugin, tmp_path):
    from rlvr.rollout import ENGINES
    from rlvr.rollout.base import engine_record

    (tmp_path / f"{plugin}_engine.py").write_text(textwrap.dedent("""
        from rlvr.rollout.base import register_engine

        @register_engine("plugin_engine")
        def make(model_dir, cfg, eos_token_ids, pad_token_id):
            raise NotImplementedError
        """))
    record = engine_record(f"{plugin}_engine:make")
    assert record is ENGINES.lookup("plugin_engine") and record.name == "plugin_engine"
    sys.modules.pop(f"{plugin}_engine", None)


def test_a_plain_function_is_an_entry_only_where_the_registry_adapts_one(plugin):
    from rlvr.algorithm.losses import POLICY_LOSSES
    from rlvr.rewards.registry import VERIFIERS

    entry = VERIFIERS.lookup(f"{plugin}:unregistered_verifier")  # verifiers always took these
    assert entry.score("a", "b") == 1.0
    with pytest.raises(ValueError, match="is not registered as a loss_fn; register it"):
        POLICY_LOSSES.lookup(f"{plugin}:unregistered_loss")  # a loss's record says per what


def test_a_registry_says_in_one_line_why_a_module_name_gives_nothing(plugin):
    registry: Registry[object] = Registry("thing")
    with pytest.raises(ValueError, match=r"^thing 'no_such_module_x:f': cannot import "
                                         r"no_such_module_x: ModuleNotFoundError"):
        registry.lookup("no_such_module_x:f")
    with pytest.raises(ValueError, match=f"module {plugin} has no function named 'nope'"):
        registry.lookup(f"{plugin}:nope")
    with pytest.raises(ValueError, match=r"'plain' is not one of \[\] \(or 'package"):
        registry.lookup("plain")


def test_only_lookup_imports(plugin):
    """`[]`, `in` and `get` read the table: a name a data row carries imports nothing."""
    from rlvr.algorithm.losses import POLICY_LOSSES

    assert f"{plugin}:halved_dapo" not in POLICY_LOSSES
    assert POLICY_LOSSES.get(f"{plugin}:halved_dapo") is None
    assert plugin not in sys.modules


def test_config_names_resolve_through_the_plugin_list(plugin):
    cfg = _cfg(f"experiment.plugins=[{plugin}]", "algorithm.loss_fn=halved_dapo",
               "algorithm.advantage_normalization_type=plugin_centered",
               "rollout.workflow=plugin_turn", "rewards.remap_verifier.last_number=plugin_digits")
    check_registered_names(cfg)
    assert os.environ[PLUGINS_ENV] == plugin  # for the processes the run starts
    assert str(Path.cwd()) in os.environ[PLUGIN_PATH_ENV].split(os.pathsep)


def test_config_names_resolve_as_module_names(plugin):
    check_registered_names(_cfg(f"algorithm.loss_fn={plugin}:halved_dapo",
                                f"rollout.workflow={plugin}:plugin_turn"))
    with pytest.raises(ConfigError, match=rf"algorithm.loss_fn='{plugin}:nope': module "):
        check_registered_names(_cfg(f"algorithm.loss_fn={plugin}:nope"))
    with pytest.raises(ConfigError, match=r"algorithm.loss_fn='nope' is not one of \["):
        check_registered_names(_cfg("algorithm.loss_fn=nope"))


def test_a_plugin_that_fails_to_import_is_a_config_error_naming_the_field(tmp_path,
                                                                          monkeypatch):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "broken_plugin_q.py").write_text("raise RuntimeError('no GPU here')\n")
    with pytest.raises(ConfigError, match=r"^experiment.plugins: cannot import "
                                          r"'broken_plugin_q': RuntimeError: no GPU here$"):
        import_plugins(["broken_plugin_q"])
    with pytest.raises(ConfigError, match="experiment.plugins: cannot import 'not_there_q'"):
        check_registered_names(_cfg("experiment.plugins=[not_there_q]"))


def test_the_cli_refuses_a_missing_plugin_with_exit_code_2(tmp_path):
    done = subprocess.run([sys.executable, "-m", "rlvr.cli", "config", TINY,
                           "experiment.plugins=[not_there_q]"], cwd=tmp_path,
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 2, done.stderr
    assert "experiment.plugins: cannot import 'not_there_q': ModuleNotFoundError" in done.stderr
    assert "Traceback" not in done.stderr


def test_a_child_process_imports_what_the_parent_recorded(plugin, tmp_path):
    import_plugins([plugin])
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    code = ("from rlvr.plugins import import_from_environment; "
            "from rlvr.algorithm.losses import POLICY_LOSSES; "
            "print(import_from_environment(), POLICY_LOSSES.lookup('halved_dapo').terms.__name__)")
    done = subprocess.run([sys.executable, "-c", code], cwd=elsewhere, env=dict(os.environ),
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == [f"['{plugin}']", "halved_dapo"]


def test_a_ray_actor_gets_the_plugin_variables(plugin):
    from rlvr.distributed.ray_session import thread_env

    assert thread_env(0) is None  # no plugins recorded: nothing to send
    import_plugins([plugin])
    env = thread_env(2)["env_vars"]
    assert env["OMP_NUM_THREADS"] == "2" and env[PLUGINS_ENV] == plugin
    assert import_from_environment() == [plugin]


def _in_main(source: str) -> dict:
    """Run `source` as a script's code would: its functions' module is __main__."""
    namespace = {"__name__": "__main__"}
    exec(compile(textwrap.dedent(source), "<script>", "exec"), namespace)
    return namespace


def test_a_main_verifier_is_refused_where_workers_would_need_it():
    _in_main("""
        from rlvr.rewards import register_verifier

        @register_verifier("script_reward_q")
        def script_reward_q(completion, ground_truth):
            return 1.0
        """)
    with pytest.raises(ConfigError, match=r"^verifier 'script_reward_q' is defined in __main__ "
                                          r".*verifier worker processes \(rewards.num_workers=2"
                                          r".*move it into a module and list that module in "
                                          r"experiment.plugins$"):
        check_main_entries(_cfg("rewards.num_workers=2"))
    with pytest.raises(ConfigError, match="data-preparation actor"):
        check_main_entries(_cfg("rewards.num_workers=0", "distributed.launcher=ray",
                                "rollout.num_engines=1", "distributed.data_prep_actor=true"))
    check_main_entries(_cfg("rewards.num_workers=0"))  # one process: it works


def test_a_main_loss_is_refused_where_learner_ranks_would_need_it():
    _in_main("""
        from rlvr.algorithm.losses import dapo_loss, register_policy_loss

        @register_policy_loss("script_loss_q")
        def script_loss_q(inputs, params):
            return dapo_loss(inputs, params)
        """)
    with pytest.raises(ConfigError, match=r"algorithm.loss_fn='script_loss_q' is defined in "
                                          r"__main__.*the learner ranks"):
        check_registered_names(_cfg("algorithm.loss_fn=script_loss_q",
                                    "distributed.num_learners_per_node=[2]"))
    with pytest.raises(ConfigError, match="the Ray learner actors"):
        check_main_entries(_cfg("algorithm.loss_fn=script_loss_q", "distributed.launcher=ray"))
    check_main_entries(_cfg("algorithm.loss_fn=script_loss_q"))  # one learner, here
    with pytest.raises(ConfigError, match="engine actors"):
        check_main_entries(_cfg("distributed.launcher=ray", "rollout.num_engines=1",
                                "rollout.engine=__main__:make_engine"))


def test_several_main_entries_are_named_in_one_line():
    _in_main("""
        from rlvr.algorithm.losses import dapo_loss, register_policy_loss
        from rlvr.rewards import register_verifier

        @register_policy_loss("script_loss_r")
        def script_loss_r(inputs, params):
            return dapo_loss(inputs, params)

        @register_verifier("script_reward_r")
        def script_reward_r(completion, ground_truth):
            return 1.0
        """)
    with pytest.raises(ConfigError) as refused:
        check_main_entries(_cfg("algorithm.loss_fn=script_loss_r",
                                "distributed.num_learners_per_node=[2]"))
    assert "\n" not in str(refused.value)
    assert str(refused.value).startswith("defined in __main__ (a script or notebook), which the "
                                         "run's other processes cannot import: "
                                         "algorithm.loss_fn='script_loss_r' (needed in the "
                                         "learner ranks (distributed.num_learners_per_node=[2]))"
                                         "; verifier 'script_reward_r' (needed in the verifier "
                                         "worker processes")


SCRIPT = """
import sys

from rlvr.cli import main
from rlvr.rewards import register_verifier


@register_verifier("script_reward")
def script_reward(completion, ground_truth):
    return float(ground_truth in completion)


sys.exit(main(["train", {tiny!r}, "rewards.remap_verifier.last_number=script_reward",
               "experiment.output_dir=out", "experiment.total_episodes=16",
               "eval.local_eval_every=0", "checkpoint.save_freq=0",
               "logging.progress_bar=false", *sys.argv[1:]]))
"""


@pytest.mark.slow
def test_a_script_that_registers_a_verifier_is_refused_before_the_model_or_trains_alone(
        tmp_path):
    """What a TRL user writes: the reward function in the script. With verifier workers the run
    is refused at start (rc 2, one line, nothing written); scored in this process, it trains."""
    script = tmp_path / "train_script.py"
    script.write_text(SCRIPT.format(tiny=TINY))
    done = subprocess.run([sys.executable, str(script)], cwd=tmp_path, capture_output=True,
                          text=True, timeout=300)
    assert done.returncode == 2, done.stderr[-2000:]
    assert ("verifier 'script_reward' is defined in __main__ (a script or notebook), which the "
            "verifier worker processes (rewards.num_workers=2; 0 scores in this process) cannot "
            "import: move it into a module and list that module in experiment.plugins"
            in done.stderr)
    assert "Traceback" not in done.stderr and not (tmp_path / "out").exists()
    done = subprocess.run([sys.executable, str(script), "rewards.num_workers=0"], cwd=tmp_path,
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    assert "verifier_errors" not in done.stderr and "KeyError" not in done.stderr
