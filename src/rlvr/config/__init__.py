"""The one typed config tree of a run, loaded from YAML plus `key.sub=value` overrides.

- `schema`: the tree, one dataclass per section (experiment, model, data, rollout, rewards,
  algorithm, optimizer, distributed, checkpoint, eval, logging); derived values (training
  steps, world size) are properties, never stored twice.
- `loading`: OmegaConf does the parsing, merging and per-field type checks (unknown keys and
  wrong types fail with the field's full name).
- `checks`: `validate`, the cross-field rules, naming every offending field at once.
Names of registered parts (losses, engines, verifiers, ...) are checked where the parts are
built (`rlvr.run.build`), still before any model loads: this package imports nothing else from
rlvr, so every part can import its settings from here without a cycle. Each component
receives only its own section. It knows no model, tensor or process group.

Field names follow open-instruct's `grpo_fast.py` where it has one, with its meaning:
`num_mini_batches` is optimizer steps per batch (one per mini-batch), `num_epochs` passes over
the batch; gradient accumulation inside one step is `gradient_accumulation_steps`.
"""

from rlvr.config.checks import validate, warnings_for
from rlvr.config.loading import load_config, to_dict, to_yaml
from rlvr.config.schema import (AlgorithmConfig, CheckpointConfig, Config, ConfigError,
                                DataConfig, DataSourceConfig, DistributedConfig, EvalConfig,
                                ExperimentConfig, JudgeConfig, LoggingConfig, LoraConfig,
                                ModelConfig, OptimizerConfig, RewardsConfig, RolloutConfig,
                                SlurmConfig)

__all__ = ["AlgorithmConfig", "CheckpointConfig", "Config", "ConfigError", "DataConfig",
           "DataSourceConfig", "DistributedConfig", "EvalConfig", "ExperimentConfig",
           "JudgeConfig", "LoggingConfig", "LoraConfig", "ModelConfig", "OptimizerConfig",
           "RewardsConfig", "RolloutConfig", "SlurmConfig", "load_config", "to_dict", "to_yaml",
           "validate", "warnings_for"]
