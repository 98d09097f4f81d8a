"""Config loading: YAML + overrides, typed fields, cross-field rules, derived values."""

import re

import pytest

from rlvr.cli import main
from rlvr.config import ConfigError, load_config
from rlvr.run.input_checks import check_registered_names


def _write(tmp_path, text):
    path = tmp_path / "c.yaml"
    path.write_text(text)
    return path


def test_defaults_and_derived_steps():
    cfg = load_config(None, ["experiment.total_episodes=64", "rollout.num_unique_prompts_rollout=4",
                             "rollout.num_samples_per_prompt_rollout=4"])
    assert cfg.num_training_steps == 4 and cfg.world_size == 1


def test_yaml_then_overrides(tmp_path):
    path = _write(tmp_path, "optimizer:\n  learning_rate: 0.1\nalgorithm:\n  beta: 0.5\n")
    cfg = load_config(path, ["optimizer.learning_rate=0.2",
                             "data.train=[{name: gsm8k, weight: 3}, {name: addition}]"])
    assert cfg.optimizer.learning_rate == 0.2 and cfg.algorithm.beta == 0.5
    assert [(s.name, s.weight) for s in cfg.data.train] == [("gsm8k", 3.0), ("addition", 1.0)]


def test_unknown_key_names_the_field(tmp_path):
    with pytest.raises(ConfigError, match="algorithm.clip_hihger"):
        load_config(_write(tmp_path, "algorithm:\n  clip_hihger: 0.3\n"))
    with pytest.raises(ConfigError, match="rollout.nope"):
        load_config(None, ["rollout.nope=1"])


def test_wrong_type_names_the_field():
    with pytest.raises(ConfigError, match="rollout.response_length"):
        load_config(None, ["rollout.response_length=long"])


@pytest.mark.parametrize("overrides, field", [
    (["algorithm.beta=0.1", "algorithm.load_ref_policy=false"], "algorithm.load_ref_policy"),
    (["algorithm.pack_length=100", "data.max_prompt_length=90"], "algorithm.pack_length"),
    (["rollout.num_samples_per_prompt_rollout=1"], "rollout.num_samples_per_prompt_rollout"),
    (["experiment.total_episodes=3"], "experiment.total_episodes"),
    (["distributed.num_learners_per_node=[2]", "distributed.sharding=none"],
     "distributed.sharding=none cannot split 2"),
    (["distributed.launcher=ray", "distributed.num_learners_per_node=[2]",
      "distributed.sharding=none"], "distributed.sharding"),
    (["distributed.launcher=slurm"], "distributed.launcher"),
    (["distributed.launcher=slurm", "rollout.engine=remote", "distributed.slurm.nodes=2",
      "distributed.num_learners_per_node=[2,1]"], "srun --ntasks-per-node"),
    (["rollout.num_engines=1"], "distributed.launcher=ray"),
    (["rollout.num_engines=-1"], "rollout.num_engines"),
    (["distributed.launcher=ray", "distributed.data_prep_actor=true"],
     "distributed.data_prep_actor"),
    (["rollout.tensor_parallel_size=2", "rollout.engine=transformers"],
     "rollout.engine=transformers does not"),
    (["algorithm.kl_estimator=7"], "algorithm.kl_estimator"),
    # Estimator 0's gradient averages to 0: a penalty in name only.
    (["algorithm.beta=0.1", "algorithm.kl_estimator=0"], "algorithm.kl_estimator=0 with"),
    # rho bounds must bracket 1 (rho is 1 when engine and learner agree)
    (["algorithm.rho_correction=true", "algorithm.rho_clamp_upper=0.9"],
     "algorithm.rho_clamp_upper=0.9 must be > 1"),
    (["algorithm.rho_correction=true", "algorithm.rho_clamp_lower=1.0"],
     "algorithm.rho_clamp_lower=1.0 must be in [0, 1)"),
    (["rollout.async_steps=1", "algorithm.rho_clamp_upper=1.0"], "rho is 1 when the engine"),
    # rho against a top-p-truncated engine distribution would measure the truncation
    (["algorithm.rho_correction=true", "rollout.top_p=0.9"], "rollout.top_p"),
    (["algorithm.truncated_in_baseline=true"], "algorithm.mask_truncated_completions"),
    (["rewards.additive_format_reward=true"], "rewards.apply_r1_style_format_reward"),
    (["rollout.async_steps=-1"], "rollout.async_steps"),
    (["rollout.inflight_updates=true"], "rollout.inflight_updates"),
    (["rollout.engine=vllm", "rollout.vllm.max_model_len=64"], "rollout.vllm.max_model_len"),
    (["model.device=tpu"], "model.device"),
    (["model.attn_implementation=flash_attention_3"], "model.attn_implementation"),
    (["checkpoint.state_format=zip"], "checkpoint.state_format"),
    (["rollout.vllm.gpu_memory_utilization=1.5"], "rollout.vllm.gpu_memory_utilization"),
    (["rollout.weight_sync_bucket_mb=0"], "rollout.weight_sync_bucket_mb"),
    (["algorithm.max_tokens_per_micro_batch=512", "algorithm.pack_length=1024"],
     "algorithm.max_tokens_per_micro_batch"),
    # colocated vLLM: every reason named at once
    (["rollout.colocate=true"], "rollout.engine=vllm"),
    (["rollout.colocate=true", "rollout.engine=vllm", "rollout.async_steps=1"],
     "rollout.async_steps=0"),
    (["rollout.colocate=true", "rollout.engine=vllm"], "vllm.gpu_memory_utilization <= 0.7"),
    # states and model checkpoints share step_NNNNNN names: each would replace or delete the other
    (["experiment.output_dir=runs/x", "checkpoint.checkpoint_state_dir=runs/x/checkpoints"],
     "checkpoint.checkpoint_state_dir=runs/x/checkpoints collides with the model saves"),
    (["experiment.output_dir=runs/x", "checkpoint.checkpoint_state_dir=runs/x/../x/final/s"],
     "checkpoint.checkpoint_state_dir"),
    (["experiment.output_dir=runs/x", "checkpoint.checkpoint_state_dir=runs/x/checkpoints/s"],
     "checkpoint.checkpoint_state_dir"),
    (["experiment.output_dir=runs/step_000001", "checkpoint.checkpoint_state_dir=runs"],
     "checkpoint.checkpoint_state_dir"),
])
def test_incompatible_settings_name_their_fields(overrides, field):
    # Checks that ask an engine's record (rlvr.run.input_checks) run at start with the config's
    with pytest.raises(ConfigError, match=re.escape(field)):
        check_registered_names(load_config(None, overrides))


@pytest.mark.parametrize("state_dir", ["runs/x/state", "runs/x", "runs/x/ckpt", "/elsewhere"])
def test_a_state_folder_of_its_own_is_accepted(state_dir):
    load_config(None, ["experiment.output_dir=runs/x",
                       f"checkpoint.checkpoint_state_dir={state_dir}"])


def test_all_problems_reported_at_once():
    with pytest.raises(ConfigError) as e:
        load_config(None, ["rollout.top_p=2", "rollout.temperature=0"])
    assert "rollout.top_p" in str(e.value) and "rollout.temperature" in str(e.value)


def test_cli_reports_config_errors_with_status_2(capsys):
    assert main(["train", "configs/tiny.yaml", "algorithm.beta=-1"]) == 2
    assert "algorithm.beta" in capsys.readouterr().err
    assert main(["config", "configs/tiny.yaml", "no-such-file.yaml"]) == 2
    assert "no-such-file.yaml does not exist" in capsys.readouterr().err


def test_presets_merge_over_a_base_config():
    cfg = load_config(["configs/tiny.yaml", "configs/presets/dr_grpo.yaml"],
                      ["algorithm.loss_denominator=512"])
    assert cfg.algorithm.advantage_normalization_type == "centered"
    assert cfg.algorithm.loss_denominator == 512.0
    assert cfg.rollout.response_length == 16  # from the base, untouched by the preset


def test_rewards_section():
    cfg = load_config(None, ["rewards.remap_verifier={math: gsm8k}", "rewards.timeout_s=3"])
    assert cfg.rewards.remap_verifier == {"math": "gsm8k"} and cfg.rewards.timeout_s == 3.0


def test_async_with_top_p_warns_that_the_default_correction_is_off():
    from rlvr.config import warnings_for

    cfg = load_config(None, ["rollout.async_steps=1", "rollout.top_p=0.9"])
    assert not cfg.uses_rho_correction
    assert any("top_p=0.9" in w and "OFF" in w for w in warnings_for(cfg))
    assert warnings_for(load_config(None, ["rollout.async_steps=1"])) == []


def test_config_imports_nothing_else_from_rlvr():
    # A leaf: parts import their settings from it, so it must import none of them.
    import ast
    from pathlib import Path

    import rlvr.config

    package = Path(rlvr.config.__file__).parent
    modules = sorted(package.rglob("*.py"))  # the schema is a package of its own
    assert len(modules) >= 8  # __init__, schema's, fields, loading, checks
    for path in modules:
        tree = ast.parse(path.read_text())
        imported = [n.module for n in ast.walk(tree) if isinstance(n, ast.ImportFrom)]
        imported += [a.name for n in ast.walk(tree) if isinstance(n, ast.Import)
                     for a in n.names]
        outside = [m for m in imported if m and m.startswith("rlvr")
                   and not m.startswith("rlvr.config")]
        assert not outside, f"{path.name} imports {outside}"


def test_lora_section_defaults_off_and_bad_values_name_their_fields():
    from rlvr.config import warnings_for

    assert load_config(None).model.lora.rank == 0
    cfg = load_config(None, ["model.lora.rank=8", "model.lora.target_modules=[q_proj,v_proj]"])
    assert cfg.model.lora.target_modules == ["q_proj", "v_proj"] and warnings_for(cfg) == []
    with pytest.raises(ConfigError) as error:
        load_config(None, ["model.lora.rank=8", "model.lora.alpha=0", "model.lora.dropout=1.0",
                           "model.lora.target_modules=[]"])
    for field in ("model.lora.alpha=0", "model.lora.dropout=1.0", "model.lora.target_modules"):
        assert field in str(error.value)
    lossy = load_config(None, ["model.lora.rank=8", "model.lora.dropout=0.1"])
    assert any("model.lora.dropout=0.1" in w for w in warnings_for(lossy))


def test_lora_refuses_polyak_reference_updates():
    with pytest.raises(ConfigError, match=r"ref_policy_update_freq=2 with model.lora.rank=4.*"
                                          r"base model"):
        load_config(None, ["model.lora.rank=4", "algorithm.beta=0.1",
                           "algorithm.ref_policy_update_freq=2"])


def test_a_config_cannot_read_the_environment_through_a_resolver(tmp_path, monkeypatch):
    """`${oc.env:...}` copied a secret into the run's name, its config.yaml and W&B."""
    monkeypatch.setenv("RLVR_TEST_SECRET", "hf_secret_token")
    shared = tmp_path / "shared.yaml"
    shared.write_text("experiment:\n  name: run-${oc.env:RLVR_TEST_SECRET}\n")
    with pytest.raises(ConfigError, match=r"'experiment.name'.*calls a resolver"):
        load_config(shared)
    with pytest.raises(ConfigError, match=r"calls a resolver"):
        load_config(None, ["data.train=[{name: '${oc.env:RLVR_TEST_SECRET}'}]"])
    # A reference to another field is not a resolver: still allowed.
    assert load_config(None, ["experiment.name=${experiment.seed}-run"]).experiment.name == "1-run"


@pytest.mark.parametrize("old, new", [
    ("rollout.vllm_num_engines", "rollout.num_engines"),
    ("rollout.vllm_tensor_parallel_size", "rollout.tensor_parallel_size"),
    ("rollout.vllm_kv_cache_gb", "rollout.vllm.kv_cache_gb"),
])
def test_an_old_name_is_refused_naming_its_new_one(tmp_path, old, new):
    # rlvr.config.migration: in an override and in a YAML file (a saved run's config.yaml).
    with pytest.raises(ConfigError, match=f"'{old}' in the command-line overrides was "
                                          f"renamed: use {new}"):
        load_config(None, [f"{old}=1"])
    section, name = old.split(".")
    path = tmp_path / "old.yaml"
    path.write_text(f"{section}:\n  {name}: 1\n")
    with pytest.raises(ConfigError, match=f"'{old}' in {path} was renamed: use {new}"):
        load_config(path)


def test_the_cli_exits_2_for_an_old_name(capsys):
    from rlvr.cli import main

    assert main(["config", "rollout.vllm_num_engines=2"]) == 2
    assert "use rollout.num_engines" in capsys.readouterr().err
