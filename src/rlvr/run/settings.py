"""Each part's settings record, made from the config: the learner's, the engine's, the episode
source's, the scorer's, the evaluator's. A part receives only its record, never the config
tree; a record's fields keep the config's names where they are the same setting.

Not here: building the parts (`rlvr.run.build`), the config itself (`rlvr.config`).
"""

from __future__ import annotations

import os
from dataclasses import fields, is_dataclass
from pathlib import Path

from rlvr.algorithm.importance import RhoCorrection
from rlvr.algorithm.losses import LossParams
from rlvr.config import Config
from rlvr.device import engine_dtype
from rlvr.data.templates import merge_stop_strings, template_text
from rlvr.learner import LearnerSettings
from rlvr.learner.lora import LoraSettings
from rlvr.learner.memory_plan import GIB
from rlvr.models import resolve_model_dir
from rlvr.producer.evaluation import EvalSettings
from rlvr.producer.groups import RewardShaping
from rlvr.producer.prompt_selection import ActiveSampling
from rlvr.producer.source import SourceSettings
from rlvr.producer.training_batch import BatchSettings
from rlvr.rewards.format import mentions_answer_tags
from rlvr.rewards.judge import JudgeSettings
from rlvr.rewards.scorer import ScorerSettings
from rlvr.rollout import EngineSettings
from rlvr.run.paths import RunPaths
from rlvr.types import SamplingParams
from rlvr.workflows import WorkflowSettings
from rlvr.workflows.runner import EpisodePath


def learner_settings(cfg: Config, bf16: bool = False) -> LearnerSettings:
    opt = cfg.optimizer
    return LearnerSettings(
        learning_rate=opt.learning_rate, lr_scheduler_type=opt.lr_scheduler_type,
        warm_up_steps=cfg.warm_up_optimizer_steps, lr_num_cycles=opt.lr_num_cycles,
        lr_end=opt.lr_end, lr_power=opt.lr_power,
        total_optimizer_steps=cfg.num_training_steps * cfg.optimizer_steps_per_batch,
        weight_decay=opt.weight_decay, max_grad_norm=opt.max_grad_norm,
        betas=(opt.adam_beta1, opt.adam_beta2), eps=opt.adam_eps,
        bf16_autocast=bf16,
        gradient_checkpointing=cfg.model.gradient_checkpointing,
        compile_backend="inductor" if cfg.model.compile else None,
        max_tokens_per_micro_batch=cfg.algorithm.max_tokens_per_micro_batch,
        pack_length=cfg.algorithm.pack_length,
        max_memory_bytes=(round(cfg.model.max_memory_gb * GIB)
                          if cfg.model.max_memory_gb is not None else None))


def lora_settings(cfg: Config) -> LoraSettings | None:
    """`model.lora` for the learner, or None when it is off (rank 0). The base model is
    recorded as a built-in name or an absolute directory, so a checkpoint finds it from
    anywhere (`rlvr merge`)."""
    lora = cfg.model.lora
    if lora.rank == 0:
        return None
    name = cfg.model.name_or_path
    base = str(Path(name).resolve()) if Path(name).exists() else name
    return LoraSettings(rank=lora.rank, alpha=lora.alpha, dropout=lora.dropout,
                        target_modules=(tuple(lora.target_modules)
                                        if lora.target_modules is not None else None),
                        base_model=base, init_seed=cfg.experiment.seed)


def actor_threads(cfg: Config) -> int:
    """Torch threads per learner or engine actor: `model.num_threads`, else the node's cores
    shared among its learners. Ray would leave one (it sets OMP_NUM_THREADS to the actor's
    CPU count), which made a lone learner actor 3.5x slower here than the same learner
    in process."""
    if cfg.model.num_threads > 0:
        return cfg.model.num_threads
    return max(1, (os.cpu_count() or 1) // max(cfg.distributed.num_learners_per_node))


def engine_settings(cfg: Config, device: str, bf16: bool) -> EngineSettings:
    """The rollout section's fields an engine reads (same names), for engines here or in
    actors, the run's device type, and its weight dtype (`engine_dtype`, from whether the run
    computes in bf16); nothing the trainer alone uses travels with them."""
    r = cfg.rollout
    derived = {"device": device, "dtype": engine_dtype(r.dtype, bf16),
               "weight_update_dir": str(RunPaths(cfg.experiment.output_dir).weight_updates),
               "server_key_file": str(RunPaths(cfg.experiment.output_dir).server_key),
               "weight_update_timeout_s": cfg.distributed.collective_timeout_s,
               # each engine's own section (rollout.<engine>): the sections of the rollout config
               "engine_options": {f.name: getattr(r, f.name) for f in fields(r)
                                  if is_dataclass(getattr(r, f.name))}}
    same_names = {f.name: getattr(r, f.name) for f in fields(EngineSettings)
                  if f.name not in derived}
    same_names["server_addresses"] = tuple(same_names["server_addresses"])
    return EngineSettings(**derived, **same_names)


def source_settings(cfg: Config) -> SourceSettings:
    r, a = cfg.rollout, cfg.algorithm
    return SourceSettings(
        prompts_per_step=r.num_unique_prompts_rollout,
        sampling=SamplingParams(n=r.num_samples_per_prompt_rollout, temperature=r.temperature,
                                top_p=r.top_p, max_tokens=r.response_length,
                                stop_strings=sampling_stop_strings(cfg), seed=cfg.experiment.seed),
        shaping=reward_shaping(cfg),
        active=ActiveSampling(a.active_sampling, a.active_sampling_max_rounds),
        retire_pass_rate=a.no_resampling_pass_rate,
        tokenizer_dir=resolve_model_dir(cfg.model.name_or_path),
        episodes=episode_path(cfg))  # evaluation plays the same


def sampling_stop_strings(cfg: Config) -> tuple[str, ...]:
    """Where training and eval samples stop: `rollout.stop_strings`, then those the chat
    template's format implies (r1_zero's `</answer>`)."""
    return merge_stop_strings(cfg.rollout.stop_strings, cfg.data.chat_template)


def episode_path(cfg: Config) -> EpisodePath:
    """How the run plays an episode: the source's (`SourceSettings.episode_path`) and the
    evaluator's (`EvalSettings.episodes`), so an eval episode runs the workflow training runs."""
    return EpisodePath(cfg.rollout.workflow, workflow_settings(cfg), cfg.rollout.episode_timeout_s,
                       cfg.data.chat_template)


def workflow_settings(cfg: Config) -> WorkflowSettings:
    r = cfg.rollout
    return WorkflowSettings(max_turns=r.max_turns, turn_discount=r.turn_discount,
                            feedback=r.feedback, max_tool_calls=r.max_tool_calls,
                            tool_timeout_s=r.tool_timeout_s,
                            tool_output_chars=r.tool_output_chars,
                            max_episode_tokens=cfg.episode_tokens,
                            args=dict(r.workflow_args))


def scorer_settings(cfg: Config, tokenizer: object) -> ScorerSettings:
    """`rewards.*` as the scorer reads it. `answer_tags` null: the tags mark answers where the
    run asks for them, its chat template (read with `tokenizer`) naming them or its R1 format
    reward on."""
    rw = cfg.rewards
    tags = rw.answer_tags
    if tags is None:
        tags = rw.apply_r1_style_format_reward or mentions_answer_tags(
            template_text(cfg.data.chat_template, tokenizer))
    return ScorerSettings(num_workers=rw.num_workers, timeout_s=rw.timeout_s,
                          aggregator=rw.reward_aggregator, judge=judge_settings(cfg),
                          answer_tags=tags)


def judge_settings(cfg: Config) -> JudgeSettings | None:
    """`rewards.judge` as the judge reads it (same field names; a null rubric or score regex
    keeps the judge's default), on the run's `model.device`."""
    j = cfg.rewards.judge
    if j is None:
        return None
    given = {f.name: getattr(j, f.name) for f in fields(j) if getattr(j, f.name) is not None}
    return JudgeSettings(**given, device=cfg.model.device)


def eval_settings(cfg: Config) -> EvalSettings:
    """`eval.*` as the evaluator reads it; stop strings are training's (the same answers), and
    so is the episode (the run's workflow, `episode_path`)."""
    ev = cfg.eval
    return EvalSettings(
        sampling=SamplingParams(n=ev.num_samples, temperature=ev.temperature, top_p=ev.top_p,
                                max_tokens=cfg.eval_response_length,
                                stop_strings=sampling_stop_strings(cfg),
                                seed=cfg.experiment.seed),
        pass_at_k=tuple(ev.pass_at_k), max_prompts=ev.max_prompts,
        episodes=episode_path(cfg))


def reward_shaping(cfg: Config) -> RewardShaping:
    a, rw = cfg.algorithm, cfg.rewards
    return RewardShaping(
        non_stop_penalty=a.non_stop_penalty, non_stop_penalty_value=a.non_stop_penalty_value,
        overlong_buffer=a.overlong_buffer, overlong_penalty_factor=a.overlong_penalty_factor,
        max_tokens=cfg.rollout.response_length,
        format_reward=rw.apply_r1_style_format_reward,
        format_reward_value=rw.r1_style_format_reward,
        additive_format_reward=rw.additive_format_reward)


def batch_settings(cfg: Config, pad_token_id: int, share_prompts: bool) -> BatchSettings:
    """How a step's groups become a packed batch (advantages, filtering, packing)."""
    a = cfg.algorithm
    return BatchSettings(a.advantage_normalization_type, a.filter_zero_std_samples,
                         a.pack_length, pad_token_id, a.mask_truncated_completions, a.packing,
                         a.truncated_in_baseline, share_prompts=share_prompts)


def loss_params(cfg: Config, denominator: float) -> LossParams:
    """The policy loss's parameters for one mini-batch whose token (or sequence) count is
    `denominator`; a configured `algorithm.loss_denominator` (Dr.GRPO) replaces it."""
    a = cfg.algorithm
    rho = (RhoCorrection(a.rho_clamp_lower, a.rho_clamp_upper, a.rho_mask)
           if cfg.uses_rho_correction else None)
    return LossParams(clip_lower=a.clip_lower, clip_higher=a.clip_higher, beta=a.beta,
                      kl_estimator=a.kl_estimator,
                      denominator=a.loss_denominator or float(denominator), rho=rho,
                      args=dict(a.loss_args))
