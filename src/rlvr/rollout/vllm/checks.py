"""The config checks of the vLLM engine's own section (`rollout.vllm`), registered as its
record's `checks` (`rlvr.rollout.base.Engine`) and run with the other names at start, before any
model loads (`rlvr.run.input_checks`). The remote engine runs them too: the servers a launcher
starts for it are vLLM's, sized by the same section. Plain functions of the config; no vLLM
import.
"""

from __future__ import annotations

from typing import Any


def vllm_section_errors(cfg: Any) -> list[str]:
    """What vLLM cannot start with, or would cut short: its block size, a model length below the
    longest sequence training or eval asks for, and a colocated engine's memory share."""
    r, opts = cfg.rollout, cfg.rollout.vllm
    errors = []
    if opts.block_size % 16:
        errors.append(f"rollout.vllm.block_size={opts.block_size} must be a positive multiple "
                      "of 16 (of 32 on CPU)")
    longest = cfg.data.max_prompt_length + cfg.episode_tokens
    if opts.max_model_len < longest:
        errors.append(f"rollout.vllm.max_model_len={opts.max_model_len} is below "
                      f"data.max_prompt_length + the episode's tokens (rollout.response_length"
                      f", x rollout.max_turns for multi-turn workflows) = {longest}")
    eval_longest = cfg.data.max_prompt_length + cfg.eval_response_length
    if opts.max_model_len < eval_longest:
        errors.append(f"rollout.vllm.max_model_len={opts.max_model_len} is below "
                      f"data.max_prompt_length + eval.response_length = {eval_longest}")
    if r.colocate and opts.gpu_memory_utilization > 0.7:
        errors.append(f"rollout.colocate=true needs rollout.vllm.gpu_memory_utilization <= 0.7 "
                      f"(not {opts.gpu_memory_utilization}): while awake, vLLM's share and the "
                      "learner's weights, gradients and Adam state (about 16 bytes per "
                      "parameter in fp32) must fit on the one device together")
    return errors
