"""The run's identity and its policy model: `experiment`, `model` (and its `lora`).
One section per dataclass; each field's comment, range and choices are its facts
(`rlvr.config.fields`)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Optional

from rlvr.config.fields import (AT_LEAST_ONE, NON_NEGATIVE, POSITIVE, UNIT_OPEN_HIGH, Range,
                                choice, ranged)


@dataclass
class ExperimentConfig:
    name: str = "rlvr"  # the run's name (logs, W&B, the Slurm job)
    # seeds python, numpy, torch and the engine's sampler
    seed: int = ranged(1, Range(low=0, high=2**32 - 1, why="numpy seeds are below 2**32"))
    output_dir: str = "runs/rlvr"  # metrics.jsonl, config.yaml, checkpoints go here
    # samples (prompt x completion) to train on; sets the step count
    total_episodes: int = ranged(256, AT_LEAST_ONE)
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

    rank: int = ranged(0, NON_NEGATIVE)  # 0: off (every weight trains)
    alpha: float = ranged(32.0, POSITIVE)  # the adapter's output is scaled by alpha / rank
    # On the adapter's input. 0 by default, as every other dropout of the policy is forced to
    # 0: each pass over the same tokens (old logprobs, later epochs) must see one function, or
    # the ratio and the KL measure dropout noise instead of policy change.
    dropout: float = ranged(0.0, UNIT_OPEN_HIGH)
    # Linear layers inside the decoder layers to adapt, by leaf name (q_proj) or dotted suffix
    # (self_attn.q_proj); null: all of them (attention and MLP), found from the model.
    target_modules: Optional[list[str]] = None


@dataclass
class ModelConfig:
    name_or_path: str = "tiny-llama"  # built-in name, local HF directory, or hub id (online only)
    # auto: CUDA when this process (or, under Ray, the cluster) has it, else CPU. The one knob
    # that picks device, collective backend (NCCL / gloo) and default precision (rlvr.device).
    device: str = choice("auto", {"auto", "cpu", "cuda"})
    # learner weights (the optimizer's master copy): float32 | bfloat16
    dtype: str = choice("float32", {"float32", "bfloat16"})
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
    attn_implementation: str = choice(
        "auto", {"auto", "sdpa", "eager", "flex", "varlen", "flash_attention_2"})
    num_threads: int = ranged(0, NON_NEGATIVE)  # torch intra-op threads; 0 keeps torch's default
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
    max_memory_gb: Optional[float] = ranged(None, POSITIVE)
    # torch.compile each decoder layer of the learner's models (one graph for all layers,
    # dynamic shapes; `rlvr.learner.compiling`): fused elementwise work, for a compile at the
    # first update (about 20 s for SmolLM2 on 2 CPU cores with an empty kernel cache) and again
    # for one-row micro-batches and no-grad passes. Pays on long runs, not on the quick start.
    compile: bool = False
    lora: LoraConfig = field(default_factory=LoraConfig)
