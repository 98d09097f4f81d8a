"""The training loop, readable top to bottom: set up a run, then repeat `one_training_step`.

One step: sample prompts, generate a group per prompt, score (the `EpisodeSource`), compute
advantages and filter, pack, update the policy, sync weights to the engine, and report metrics.
Components are built here from their config sections and passed in explicitly; none of them
sees the whole config. With `rollout.async_steps = k > 0`, a producer thread generates batches
up to k steps ahead (`async_rollouts`) and the step trains on the oldest, minus groups more than
k versions stale. With `distributed.launcher=ray` the learners, the engines and the episode
source may each be Ray actors (`rlvr.distributed`) behind the same surfaces.
"""

from __future__ import annotations

import logging
import os
import random
import time
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import torch

from rlvr.algorithm.importance import RhoCorrection
from rlvr.async_rollouts import RolloutProducer, drop_stale_groups, staleness_metrics
from rlvr.algorithm.losses import (LossParams, PolicyLoss, normalization_unit,
                                   summarize_loss_metrics)
from rlvr.batching import BatchSettings, build_training_batch
from rlvr.checkpoint import save_final_model, save_model_checkpoint, write_text_atomic
from rlvr.config import Config, to_dict, to_yaml
from rlvr.data import DataBundle, load_datasets, tokenize_datasets
from rlvr.distributed.data_prep import DataPrepActor
from rlvr.distributed.engine_group import EngineGroup
from rlvr.distributed.trainer_learner import GroupLearner
from rlvr.episode_source import EpisodeSource, SourceSettings
from rlvr.episodes import Episodes, RewardShaping
from rlvr.evaluation import evaluate
from rlvr.interrupts import NumericalFault, StopOnSignal, TrainingInterrupted
from rlvr.learner import Learner, LearnerSettings, UpdateResult
from rlvr.metrics import JsonlSink, MetricsLogger, StepTimer
from rlvr.models import load_causal_lm, load_tokenizer, resolve_model_dir
from rlvr.rewards.scorer import RewardScorer
from rlvr.rollout import RolloutEngine, create_engine
from rlvr.rollout.weight_sync import LocalTransport, WeightTransport
from rlvr.sampling import ActiveSampling
from rlvr.state import TrainingState, capture_rng, load_latest_state, restore_rng, save_state
from rlvr.throughput import ModelShape, learner_throughput
from rlvr.tracking import build_sinks
from rlvr.types import SamplingParams

log = logging.getLogger(__name__)


@dataclass
class Run:
    """Everything a training step touches, built once by `build_run`."""

    cfg: Config
    output_dir: Path
    tokenizer: object
    data: DataBundle
    learner: Learner | GroupLearner  # one process, or ranks elsewhere (distributed.launcher=ray)
    engine: RolloutEngine
    scorer: RewardScorer  # evaluation's; a data-preparation actor scores training batches
    source: EpisodeSource | DataPrepActor  # a step's scored groups
    logger: MetricsLogger
    model_shape: ModelShape
    state_dir: Path
    episode: int = 0
    start_step: int = 0  # the step a resumed run continues after
    history: list[dict[str, float]] = field(default_factory=list)
    weights: WeightTransport | None = None  # learner -> engine; built with the engine
    started: float = field(default_factory=time.perf_counter)  # for time/elapsed


def seed_everything(seed: int) -> None:
    random.seed(seed)
    np.random.seed(seed)
    torch.manual_seed(seed)


def build_run(cfg: Config) -> Run:
    seed_everything(cfg.experiment.seed)
    if cfg.model.num_threads > 0:
        torch.set_num_threads(cfg.model.num_threads)
    output_dir = Path(cfg.experiment.output_dir)
    output_dir.mkdir(parents=True, exist_ok=True)
    write_text_atomic(output_dir / "config.yaml", to_yaml(cfg))
    # Data first: a bad row fails before any model (or a 45 s conversion) is touched.
    loaded = load_datasets(cfg.data, cfg.experiment.seed, cfg.rewards.remap_verifier)
    model_dir = resolve_model_dir(cfg.model.name_or_path)
    tokenizer = load_tokenizer(model_dir)
    data = tokenize_datasets(loaded, cfg.data, tokenizer, cfg.experiment.seed)
    policy = load_causal_lm(model_dir, cfg.model.dtype)
    if cfg.distributed.launcher == "ray":  # sized for learners and engines before either starts
        from rlvr.distributed.ray_session import ensure_ray

        r = cfg.rollout
        ensure_ray(cfg.distributed.ray_address or None,
                   cfg.world_size + r.vllm_num_engines * r.vllm_tensor_parallel_size)
    learner = build_learner(cfg, model_dir, policy)
    eos_ids = tuple(sorted({tokenizer.eos_token_id} | _generation_eos_ids(policy)))
    engine = build_engine(cfg, model_dir, eos_ids, tokenizer.pad_token_id)
    scorer = RewardScorer(**scorer_args(cfg))
    source = build_source(cfg, data, engine, scorer)
    state_dir = Path(cfg.checkpoint.checkpoint_state_dir or output_dir / "state")
    state = load_latest_state(state_dir) if cfg.checkpoint.resume else None
    if state is not None:  # before the sink opens the file: drop steps the state does not hold
        JsonlSink.truncate_after(output_dir / "metrics.jsonl", state.step)
    logger = MetricsLogger(build_sinks(cfg, output_dir, to_dict(cfg)))
    run = Run(cfg=cfg, output_dir=output_dir, tokenizer=tokenizer, data=data, learner=learner,
              engine=engine, scorer=scorer, source=source, logger=logger,
              model_shape=ModelShape.of(policy), state_dir=state_dir,
              weights=LocalTransport(engine))
    if state is not None:
        restore_state(run, state)
    return run


def learner_settings(cfg: Config) -> LearnerSettings:
    opt = cfg.optimizer
    return LearnerSettings(
        learning_rate=opt.learning_rate, lr_scheduler_type=opt.lr_scheduler_type,
        warm_up_steps=opt.warm_up_steps,
        total_optimizer_steps=cfg.num_training_steps * cfg.algorithm.num_epochs,
        weight_decay=opt.weight_decay, max_grad_norm=opt.max_grad_norm,
        betas=(opt.adam_beta1, opt.adam_beta2), eps=opt.adam_eps,
        bf16_autocast=cfg.model.bf16_autocast,
        gradient_checkpointing=cfg.model.gradient_checkpointing)


def build_learner(cfg: Config, model_dir: str, policy: torch.nn.Module) -> Learner | GroupLearner:
    """The policy trained here (local launcher), or by Ray actors that load their own copies
    and shard them (ray launcher); `policy` then stays the driver's copy for checkpoints."""
    d = cfg.distributed
    if d.launcher == "local":
        reference = Learner.frozen_copy(policy) if cfg.algorithm.beta > 0 else None
        return Learner(policy, reference, learner_settings(cfg))
    from rlvr.distributed import LearnerGroup, LearnerSpec

    spec = LearnerSpec(model_dir=str(model_dir), settings=learner_settings(cfg),
                       dtype=cfg.model.dtype, sharding=d.sharding if cfg.world_size > 1 else
                       "none", cpu_offload=d.cpu_offload, with_reference=cfg.algorithm.beta > 0,
                       timeout_s=d.collective_timeout_s, num_threads=actor_threads(cfg))
    group = LearnerGroup(spec, num_learners=cfg.world_size, backend="ray",
                         ray_address=d.ray_address or None,
                         learners_per_node=list(d.num_learners_per_node))
    return GroupLearner(group, policy)


def actor_threads(cfg: Config) -> int:
    """Torch threads per learner or engine actor: `model.num_threads`, else the node's cores
    shared among its learners. Ray would leave one (it sets OMP_NUM_THREADS to the actor's
    CPU count), which made a lone learner actor 3.5x slower here than the same learner
    in process."""
    if cfg.model.num_threads > 0:
        return cfg.model.num_threads
    return max(1, (os.cpu_count() or 1) // max(cfg.distributed.num_learners_per_node))


def build_engine(cfg: Config, model_dir: str, eos_ids: tuple[int, ...],
                 pad_id: int) -> RolloutEngine:
    """The engine in this process, or `rollout.vllm_num_engines` engine actors behind the same
    protocol."""
    r = cfg.rollout
    if r.vllm_num_engines == 0:
        return create_engine(r.engine, model_dir, r, eos_ids, pad_id)
    return EngineGroup(r.vllm_num_engines, r.engine, str(model_dir), r, eos_ids, pad_id,
                       num_threads=actor_threads(cfg),
                       cpus_per_engine=float(r.vllm_tensor_parallel_size),
                       timeout_s=cfg.distributed.collective_timeout_s,
                       ray_address=cfg.distributed.ray_address or None)


def sync_weights(run: Run, version: int) -> None:
    """Learner -> engines. From learner actors to engine actors, rank 0 broadcasts directly;
    otherwise the weights pass through this process (a tensor copy for an engine here)."""
    if isinstance(run.learner, GroupLearner) and isinstance(run.engine, EngineGroup):
        run.learner.broadcast_to(run.engine, version)
    else:
        run.weights.push(run.learner.named_weights(), version)


def restore_state(run: Run, state: TrainingState) -> None:
    parts = {"policy": state.policy, "reference": state.reference,
             "optimizer": state.optimizer, "scheduler": state.scheduler}
    try:
        run.learner.load_training_state(parts)
    except (KeyError, ValueError, RuntimeError) as e:
        # Optimizer state is keyed by index in one process and by name across learners.
        raise RuntimeError(
            f"the training state in {run.state_dir} (step {state.step}) could not be loaded "
            f"with distributed.launcher={run.cfg.distributed.launcher}: {e}. A state loads "
            "with the launcher that saved it; checkpoint.resume=false starts fresh") from e
    run.source.load_mixer_state(state.mixer)
    restore_rng(state.rng)
    run.episode, run.start_step = state.episode, state.step
    sync_weights(run, state.step)
    log.info("resumed from the training state of step %d in %s", state.step, run.state_dir)


def capture_state(run: Run, step: int) -> TrainingState:
    return TrainingState(step=step, episode=run.episode, mixer=run.source.mixer_state(),
                         rng=capture_rng(), **run.learner.training_state())


def _generation_eos_ids(model: torch.nn.Module) -> set[int]:
    eos = getattr(getattr(model, "generation_config", None), "eos_token_id", None)
    if eos is None:
        return set()
    return set(eos) if isinstance(eos, (list, tuple)) else {eos}


def source_settings(cfg: Config) -> SourceSettings:
    r, a = cfg.rollout, cfg.algorithm
    return SourceSettings(
        prompts_per_step=r.num_unique_prompts_rollout,
        sampling=SamplingParams(n=r.num_samples_per_prompt_rollout, temperature=r.temperature,
                                top_p=r.top_p, max_tokens=r.response_length,
                                stop_strings=tuple(r.stop_strings), seed=cfg.experiment.seed),
        shaping=reward_shaping(cfg),
        active=ActiveSampling(a.active_sampling, a.active_sampling_max_rounds),
        retire_pass_rate=a.no_resampling_pass_rate)


def build_source(cfg: Config, data: DataBundle, engine: RolloutEngine,
                 scorer: RewardScorer) -> EpisodeSource | DataPrepActor:
    """Prompts -> engine -> scored groups: here, or in the data-preparation actor."""
    if not cfg.distributed.data_prep_actor:
        return EpisodeSource(data.train, engine, scorer, source_settings(cfg))
    return DataPrepActor(data.train, engine, source_settings(cfg), scorer_args(cfg),
                         timeout_s=cfg.distributed.collective_timeout_s)


def scorer_args(cfg: Config) -> dict:
    rw = cfg.rewards
    return {"num_workers": rw.num_workers, "timeout_s": rw.timeout_s,
            "aggregator": rw.reward_aggregator}


def reward_shaping(cfg: Config) -> RewardShaping:
    a, rw = cfg.algorithm, cfg.rewards
    return RewardShaping(a.non_stop_penalty, a.non_stop_penalty_value, a.overlong_buffer,
                         a.overlong_penalty_factor, cfg.rollout.response_length,
                         rw.apply_r1_style_format_reward, rw.r1_style_format_reward,
                         rw.additive_format_reward)


def one_training_step(run: Run, step: int, produced: tuple[Episodes, dict[str, float]] | None = None
                      ) -> dict[str, float]:
    """Train step `step` on `produced` (made ahead by the producer), or generate it now."""
    cfg, timer = run.cfg, StepTimer()
    a = cfg.algorithm
    episodes, metrics = produced if produced is not None else run.source.produce(step)
    metrics.update(staleness_metrics(episodes.groups, policy_version=step - 1))
    training = build_training_batch(episodes.groups, BatchSettings(
        a.advantage_normalization_type, a.filter_zero_std_samples, a.pack_length,
        run.tokenizer.pad_token_id, a.mask_truncated_completions, a.packing))
    metrics.update(training.metrics)
    run.episode += sum(len(g) for g in episodes.groups)
    if training.batch is None:
        log.info("step %d: every group has zero reward spread; no update", step)
        metrics["optim/skipped_empty_batch"] = 1.0
    else:
        batch = training.batch
        # The whole batch's count, passed in, so the loss is the same however it is split.
        per_sequence = normalization_unit(a.loss_fn) == "sequence"
        count = batch.num_sequences if per_sequence else batch.num_response_tokens
        rho = (RhoCorrection(a.rho_clamp_lower, a.rho_clamp_upper, a.rho_mask)
               if a.rho_correction else None)
        params = LossParams(
            clip_lower=a.clip_lower, clip_higher=a.clip_higher, beta=a.beta,
            kl_estimator=a.kl_estimator, denominator=a.loss_denominator or float(count), rho=rho)
        with timer("training"):
            result = run.learner.update(
                batch, PolicyLoss(a.loss_fn, params), num_micro_batches=a.num_mini_batches,
                num_epochs=a.num_epochs, temperature=cfg.rollout.temperature)
        metrics.update(update_metrics(run, result))
        if a.ref_policy_update_freq and step % a.ref_policy_update_freq == 0:
            run.learner.update_reference(a.alpha)
        with timer("weight_sync"):
            sync_weights(run, step)
    timings = timer.as_metrics()
    metrics.update(timings)
    # Synchronous: generation + training + sync. Asynchronous: what the trainer spent, waiting
    # for data included; generation ran meanwhile and is reported separately.
    waited = (metrics.get("time/generation", 0.0) if produced is None
              else metrics.get("time/trainer_waiting_for_data", 0.0))
    metrics["time/step"] = sum(timings.values()) + waited
    metrics["episode"] = float(run.episode)
    return metrics


def update_metrics(run: Run, result: UpdateResult) -> dict[str, float]:
    n = max(result.num_response_tokens, 1)
    metrics = summarize_loss_metrics(result.loss_sums, float(n))
    metrics.update({
        "policy/entropy_avg": result.entropy_sum / n,
        "debug/engine_vs_local_logprob_diff_mean": result.engine_diff_sum / n,
        "debug/engine_vs_local_logprob_diff_max": result.engine_diff_max,
        "optim/grad_norm": result.grad_norm,
        "optim/lr": result.learning_rate,
        "optim/skipped_steps": float(result.skipped_steps),
    })
    metrics.update(learner_throughput(run.cfg, run.model_shape, result))
    return metrics


def run_eval(run: Run) -> dict[str, float]:
    cfg = run.cfg
    params = SamplingParams(n=1, temperature=cfg.eval.temperature,
                            max_tokens=cfg.rollout.response_length,
                            stop_strings=tuple(cfg.rollout.stop_strings), seed=cfg.experiment.seed)
    start = time.perf_counter()
    metrics = evaluate(run.engine, run.scorer, run.data.eval_prompts[:cfg.eval.max_prompts], params)
    run.scorer.metrics_since_last()  # eval verifier errors are not the step's
    metrics["time/eval"] = time.perf_counter() - start
    return metrics


def train(cfg: Config) -> Run:
    """Train for `cfg.num_training_steps` steps; returns the run (history, output dir)."""
    run = build_run(cfg)
    try:
        with StopOnSignal() as stop:
            _train_loop(run, stop)
        if cfg.checkpoint.save_final:
            save_final_model(run.learner.policy, run.tokenizer, run.output_dir)
    finally:
        run.logger.close()
        if isinstance(run.source, DataPrepActor):
            run.source.close()
        run.scorer.close()
        run.engine.close()
        if isinstance(run.learner, GroupLearner):
            run.learner.close()
    return run


def _train_loop(run: Run, stop: StopOnSignal) -> None:
    cfg = run.cfg
    if run.start_step == 0:
        _log_start(run)
    skipped_in_a_row = 0
    producer = _start_producer(run)
    try:
        for step in range(run.start_step + 1, cfg.num_training_steps + 1):
            produced = _next_produced(run, producer, step) if producer else None
            metrics = one_training_step(run, step, produced)
            skipped_in_a_row = _finish_step(run, stop, step, metrics, skipped_in_a_row)
    finally:
        if producer is not None:
            producer.close()


def _start_producer(run: Run) -> RolloutProducer | None:
    k = run.cfg.rollout.async_steps
    if k == 0:
        return None
    steps = iter(range(run.start_step + 1, 2**62))  # the step whose seed a batch uses
    return RolloutProducer(lambda: run.source.produce(next(steps)), async_steps=k)


def _next_produced(run: Run, producer: RolloutProducer, step: int
                   ) -> tuple[Episodes, dict[str, float]]:
    """The next batch fresh enough to train step `step` on (policy version step - 1)."""
    k, dropped, waited = run.cfg.rollout.async_steps, 0, 0.0
    while True:
        produced, wait_s = producer.next_batch()
        waited += wait_s
        episodes, metrics = produced.item
        kept_groups, n_dropped = drop_stale_groups(episodes.groups, step - 1, k)
        dropped += n_dropped
        if kept_groups:
            break
        log.warning("step %d: a whole batch was more than %d versions stale; drawing the next",
                    step, k)
    kept_ids = {id(g) for g in kept_groups}
    kept = Episodes(groups=kept_groups, outcomes=[o for g, o in zip(episodes.groups,
                                                                      episodes.outcomes)
                                                   if id(g) in kept_ids])
    return kept, {**metrics, "async/stale_results_dropped": float(dropped),
                  "time/trainer_waiting_for_data": waited,
                  "time/generation_waiting_for_trainer": producer.blocked_since_last()}


def _finish_step(run: Run, stop: StopOnSignal, step: int, metrics: dict[str, float],
                 skipped_in_a_row: int) -> int:
    """Eval, checkpoints, logging and fault checks after a step; the new skip streak."""
    cfg = run.cfg
    if _due(cfg.eval.local_eval_every, step, cfg.num_training_steps):
        metrics.update(run_eval(run))
    if cfg.checkpoint.save_freq and step % cfg.checkpoint.save_freq == 0:
        save_model_checkpoint(run.learner.policy, run.tokenizer, run.output_dir, step,
                              cfg.checkpoint.keep_last_n_checkpoints)
    # Wall time since this process built the run: compares runs by reward per second.
    metrics["time/elapsed"] = time.perf_counter() - run.started
    run.logger.log(step, metrics)
    run.history.append({"training_step": step, **metrics})
    skipped_in_a_row = skipped_in_a_row + 1 if metrics.get("optim/skipped_steps") else 0
    if skipped_in_a_row >= cfg.optimizer.max_consecutive_skipped_steps:
        # No state is saved for these steps: the last good one stays the latest.
        raise NumericalFault(
            f"non-finite gradients in {skipped_in_a_row} consecutive steps (up to step "
            f"{step}); the last good training state is in {run.state_dir}")
    freq = cfg.checkpoint.checkpoint_state_freq
    due = (freq and step % freq == 0) or stop.signum is not None
    # A skipped update is never the "last good" state.
    if due and not skipped_in_a_row:
        save_state(capture_state(run, step), run.state_dir, cfg.checkpoint.keep_last_n_states)
    if stop.signum is not None and step < cfg.num_training_steps:
        raise TrainingInterrupted(stop.signum, step, str(run.state_dir))
    return skipped_in_a_row


def _log_start(run: Run) -> None:
    """Step 0: data counts and the untrained model's eval, the baseline of the curve."""
    start = {"data/dropped_too_long": float(run.data.num_dropped_too_long),
             "data/bad_rows": float(run.data.num_bad_rows)}
    if run.cfg.eval.eval_at_start and run.data.eval_prompts:
        start.update(run_eval(run))
    start["time/elapsed"] = time.perf_counter() - run.started
    run.logger.log(0, {**start, "episode": 0.0})
    run.history.append({"training_step": 0, **start})


def _due(every: int, step: int, last: int) -> bool:
    """Every `every` steps, and always at the last step so a run ends with a measurement."""
    return every > 0 and (step % every == 0 or step == last)
