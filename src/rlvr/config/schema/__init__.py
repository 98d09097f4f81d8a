"""The config tree: one dataclass per section, each field with its default, its range or
choices (`rlvr.config.fields`) and what it means (its comment), in one module per group of
sections. Derived values (training steps, world size) are properties of `Config`, never stored
twice. Cross-field rules are in `rlvr.config.checks`, loading in `rlvr.config.loading`, the
generated reference in `rlvr.config.reference`."""

from __future__ import annotations

import math
from dataclasses import dataclass, field

from rlvr.config.fields import ConfigError
from rlvr.config.schema.algorithm import AlgorithmConfig, OptimizerConfig
from rlvr.config.schema.data import SPLIT_STEMS, DataConfig, DataSourceConfig
from rlvr.config.schema.model import ExperimentConfig, LoraConfig, ModelConfig
from rlvr.config.schema.rewards import JudgeConfig, RewardsConfig
from rlvr.config.schema.rollout import RolloutConfig, VllmOptions
from rlvr.config.schema.run import (CheckpointConfig, DistributedConfig, EvalConfig,
                                    HealthConfig, LoggingConfig, SlurmConfig)

__all__ = ["SPLIT_STEMS", "AlgorithmConfig", "CheckpointConfig", "Config", "ConfigError",
           "DataConfig", "DataSourceConfig", "DistributedConfig", "EvalConfig",
           "ExperimentConfig", "HealthConfig", "JudgeConfig", "LoggingConfig", "LoraConfig",
           "ModelConfig", "OptimizerConfig", "RewardsConfig", "RolloutConfig", "SlurmConfig",
           "VllmOptions"]


@dataclass
class Config:
    experiment: ExperimentConfig = field(default_factory=ExperimentConfig)  # name, seed, size
    model: ModelConfig = field(default_factory=ModelConfig)  # the policy, device, precision
    data: DataConfig = field(default_factory=DataConfig)  # prompt sources and templates
    rollout: RolloutConfig = field(default_factory=RolloutConfig)  # engines, sampling, workflows
    rewards: RewardsConfig = field(default_factory=RewardsConfig)  # how verifiers run
    algorithm: AlgorithmConfig = field(default_factory=AlgorithmConfig)  # losses, advantages
    optimizer: OptimizerConfig = field(default_factory=OptimizerConfig)  # AdamW, schedule
    distributed: DistributedConfig = field(default_factory=DistributedConfig)  # launchers
    checkpoint: CheckpointConfig = field(default_factory=CheckpointConfig)  # saves, resume
    eval: EvalConfig = field(default_factory=EvalConfig)  # in-loop and `rlvr eval` scoring
    logging: LoggingConfig = field(default_factory=LoggingConfig)  # metrics, tracking, traces
    health: HealthConfig = field(default_factory=HealthConfig)  # the run's health gates

    @property
    def samples_per_step(self) -> int:
        return self.rollout.num_unique_prompts_rollout * self.rollout.num_samples_per_prompt_rollout

    @property
    def num_training_steps(self) -> int:
        return self.experiment.total_episodes // self.samples_per_step

    @property
    def episode_tokens(self) -> int:
        """The most tokens an episode holds after its prompt: one response, or every turn of
        a multi-turn workflow (`rollout.max_episode_tokens`, else response_length x turns)."""
        r = self.rollout
        if r.workflow == "single_turn":
            return r.response_length
        return r.max_episode_tokens or r.response_length * r.max_turns

    @property
    def eval_response_length(self) -> int:
        """Tokens an eval answer may have: `eval.response_length`, else the rollout's."""
        if self.eval.response_length is None:
            return self.rollout.response_length
        return self.eval.response_length

    @property
    def gradient_accumulation_steps(self) -> int:
        """Micro-batches per mini-batch: `algorithm.gradient_accumulation_steps`, null: 1."""
        return self.algorithm.gradient_accumulation_steps or 1

    @property
    def optimizer_steps_per_batch(self) -> int:
        """What the LR schedule counts per training step: epochs x mini-batches."""
        return self.algorithm.num_epochs * self.algorithm.num_mini_batches

    @property
    def warm_up_optimizer_steps(self) -> int:
        """Optimizer steps of warm-up: `optimizer.warm_up_steps`, else `warmup_ratio` of the
        run's optimizer steps, rounded up (transformers' `get_warmup_steps`)."""
        if self.optimizer.warm_up_steps > 0:
            return self.optimizer.warm_up_steps
        total = self.num_training_steps * self.optimizer_steps_per_batch
        return math.ceil(total * self.optimizer.warmup_ratio)

    @property
    def world_size(self) -> int:
        return sum(self.distributed.num_learners_per_node)

    @property
    def uses_rho_correction(self) -> bool:
        """`algorithm.rho_correction`, or its default: on when generation runs ahead of the
        learner, unless top_p truncates (rho would then measure the truncation, see validate)."""
        if self.algorithm.rho_correction is not None:
            return self.algorithm.rho_correction
        return self.rollout.async_steps > 0 and self.rollout.top_p == 1.0

    @property
    def loads_reference(self) -> bool:
        """A reference policy is loaded: for the KL penalty, or to log the KL at beta 0."""
        return self.algorithm.beta > 0 or bool(self.algorithm.load_ref_policy)
