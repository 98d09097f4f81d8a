"""The training loop, readable top to bottom: `train` builds the run (`rlvr.run.build`), then
repeats `one_training_step`.

One step: sample prompts, generate a group per prompt, score (the `EpisodeSource`), compute
advantages and filter, pack, update the policy, sync weights to the engine, and report metrics.
With `rollout.async_steps = k > 0`, a producer thread generates batches up to k updates ahead
(`rlvr.producer.ahead`) and the step trains on the oldest, minus groups more than k versions
stale. With `distributed.launcher=ray` the learners, the engines and the episode
source may each be Ray actors (`rlvr.distributed`) behind the same surfaces.
"""

from __future__ import annotations

import contextlib
import logging
import time

from rlvr.algorithm.mini_batches import mini_batch_count, split_mini_batches
from rlvr.algorithm.losses import PolicyLoss, normalization_unit, summarize_loss_metrics
from rlvr.run.build import Run, StartPlan, build_run
from rlvr.checkpoint import save_final_model, save_model_checkpoint
from rlvr.checkpoint.state import save_state
from rlvr.config import Config
from rlvr.device import HOST, release_cached_memory
from rlvr.distributed.engine_group import EngineGroup
from rlvr.run.faults import engine_fault
from rlvr.run.input_checks import verifiers_used
from rlvr.run.errors import ResumeRefused, TrainingInterrupted
from rlvr.run.interrupts import StopOnSignal
from rlvr.learner import MiniBatch, UpdateResult
from rlvr.metrics import StepTimer, learner_throughput
from rlvr.metrics.distributions import step_distributions
from rlvr.metrics.throughput import run_peak_flops
from rlvr.metrics.traces import eval_rows, training_rows
from rlvr.producer.ahead import RolloutProducer
from rlvr.producer.ahead_state import ahead_from_json
from rlvr.producer.groups import Episodes
from rlvr.producer.staleness import drop_stale_groups, staleness_metrics
from rlvr.producer.training_batch import build_training_batch
from rlvr.rewards.canary import run_canary
from rlvr.rollout.seeds import derive_seed
# Taking and putting back a run's state, and stopping a run on purpose, each a module of its own.
from rlvr.run.settings import batch_settings, loss_params
from rlvr.run.state import capture_state, restore_state, step_start, sync_weights
from rlvr.run.stopping import (Streaks, UnsyncedStep, check_health, check_streaks,
                           note_verification, stop_between_steps, stop_if_engine_fault)
from rlvr.types import PackedBatch, Sample

log = logging.getLogger(__name__)


def one_training_step(run: Run, step: int, produced: tuple[Episodes, dict[str, float]] | None = None
                      ) -> dict[str, float]:
    """Train step `step` on `produced` (made ahead by the producer), or generate it now."""
    cfg, timer = run.cfg, StepTimer()
    a = cfg.algorithm
    episodes, metrics = produced if produced is not None else run.source.produce(step)
    metrics.update(staleness_metrics(episodes.groups, policy_version=run.policy_version))
    note_verification(run, step, episodes, metrics)
    with timer("batching"):  # advantages, filtering, packing
        training = build_training_batch(episodes.groups, batch_settings(
            cfg, run.tokenizer.pad_token_id,
            share_prompts=run.devices.share_prompts if run.devices is not None else True))
    metrics.update(training.metrics)
    # A sample with a non-zero advantage is the only thing a policy gradient learns from (with
    # zero-spread groups kept, `filter_zero_std_samples=false`, a batch may have none).
    metrics["batch/learning_signal"] = float(any(s.advantage for s in training.samples))
    if run.traces is not None:
        with timer("traces"):
            _write_step_traces(run, step, episodes, training.samples)
    run.episode += sum(len(g) for g in episodes.groups)
    if training.batch is None:
        log.info("step %d: every group has zero reward spread; no update", step)
        metrics["optim/skipped_empty_batch"] = 1.0
        # The schedule counts optimizer steps: those this training step would have taken.
        run.learner.skip_update(cfg.optimizer_steps_per_batch)
        _polyak_if_due(run, step)  # its schedule counts training steps, empty ones too
        run.logger.log_distributions(step, step_distributions(
            episodes.groups, training.samples).summaries())
    else:
        mini_batches = training_mini_batches(cfg, training.batch, step)
        with timer("training"), engine_asleep(run):
            result = run.learner.update_mini_batches(mini_batches, num_epochs=a.num_epochs,
                                                     temperature=cfg.rollout.temperature)
            missing = a.num_mini_batches - len(mini_batches)  # fewer rows than mini-batches
            if missing:
                run.learner.skip_update(missing * a.num_epochs)
        metrics["optim/num_optimizer_steps"] = float(len(mini_batches) * a.num_epochs)
        run.last_update_step = step
        metrics.update(update_metrics(run, result))
        # Before the sync, which may fail after the update landed (`UnsyncedStep`).
        run.logger.log_distributions(step, step_distributions(
            episodes.groups, training.samples, result.engine_ratio_T).summaries())
        _polyak_if_due(run, step)
        with timer("weight_sync"):
            try:
                sync_weights(run, run.policy_version + 1)
            except Exception as e:
                if engine_fault(e) is None:
                    raise
                # The update landed: the step's record (and model checkpoint) outlive the sync.
                raise UnsyncedStep({**metrics, **timer.as_metrics(),
                                    "episode": float(run.episode)}) from e
    timings = timer.as_metrics()
    metrics.update(timings)
    # Synchronous: generation + training + sync. Asynchronous: what the trainer spent, waiting
    # for data included; generation ran meanwhile and is reported separately.
    waited = (metrics.get("time/generation", 0.0) if produced is None
              else metrics.get("time/trainer_waiting_for_data", 0.0))
    metrics["time/step"] = sum(timings.values()) + waited
    metrics["episode"] = float(run.episode)
    return metrics


def _polyak_if_due(run: Run, step: int) -> None:
    """The reference's Polyak step toward the policy every `ref_policy_update_freq` training
    steps. A step whose batch is empty still counts: skipping it moved the reference less
    often than the schedule says (with most steps empty, hardly at all)."""
    a = run.cfg.algorithm
    if a.ref_policy_update_freq and step % a.ref_policy_update_freq == 0:
        run.learner.update_reference(a.alpha)


def training_mini_batches(cfg: Config, batch: PackedBatch, step: int) -> list[MiniBatch]:
    """The batch's `algorithm.num_mini_batches` mini-batches (`split_mini_batches`, rows
    permuted with a seed of the run's seed and `step`), each with its loss bound to its own
    count as denominator (open-instruct's per-mini-batch token count; a constant
    `loss_denominator` stays constant), so a micro-batch or rank split of a mini-batch never
    changes its gradient."""
    a = cfg.algorithm
    per = normalization_unit(a.loss_fn)
    out = []
    seed = derive_seed(cfg.experiment.seed, step=step, mini_batch_order=1)
    for part in split_mini_batches(batch, a.num_mini_batches, seed):
        params = loss_params(cfg, mini_batch_count(part, per))
        out.append(MiniBatch(part, PolicyLoss(a.loss_fn, params),
                             cfg.gradient_accumulation_steps))
    return out


def _write_step_traces(run: Run, step: int, episodes: Episodes, trained: list[Sample]) -> None:
    """Every sample of the step to `traces/`: the trained ones and those dropped before the
    update (zero reward spread, truncated, or too stale)."""
    stale = episodes.dropped_stale or Episodes(groups=[], outcomes=[])
    rows = training_rows(step, episodes.groups + stale.groups,
                         episodes.outcomes + stale.outcomes, trained)
    run.traces.write_train(step, rows)


@contextlib.contextmanager
def engine_asleep(run: Run):
    """With `rollout.colocate`, the engine gives the shared device to the learner for the
    update (`Engine.can_sleep`: its sleep mode) and takes it back before the weights sync into
    it."""
    if not run.cfg.rollout.colocate:
        yield
        return
    run.engine.sleep()
    try:
        yield
    finally:
        # The learner's allocator keeps what the update freed (up to all the plan let it use).
        release_cached_memory(run.devices.type if run.devices is not None else HOST.type)
        run.engine.wake_up()


def update_metrics(run: Run, result: UpdateResult) -> dict[str, float]:
    n = max(result.num_response_tokens, 1)
    metrics = summarize_loss_metrics(result.loss_sums)
    metrics.update({
        "policy/entropy_avg": result.entropy_sum / n,
        "debug/engine_vs_local_logprob_diff_mean": result.engine_diff_sum / n,
        "debug/engine_vs_local_logprob_diff_max": result.engine_diff_max,
        "debug/engine_vs_local_kl": result.engine_kl_sum / n,  # KL(engine || local), k3
        "optim/grad_norm": result.grad_norm,
        "optim/lr": result.learning_rate,
        "optim/skipped_steps": float(result.skipped_steps),
    })
    if run.peak_flops is None:  # measured once, at the first update (a short matmul probe)
        run.peak_flops = run_peak_flops(run.cfg, run.devices is not None and run.devices.bf16)
    metrics.update(learner_throughput(run.cfg, run.model_shape, result, run.peak_flops))
    metrics.update(result.memory)
    return metrics


def run_eval(run: Run, step: int) -> dict[str, float]:
    """The eval sets' figures (`rlvr.producer.evaluation`) after step `step`; with
    `logging.save_traces` every sample goes to `traces/eval/` too."""
    if run.evaluator is None:
        return {}
    start = time.perf_counter()
    # Announced: an eval can take longer than a step, and nothing else prints meanwhile.
    log.info("eval %s step %d: %d prompts ...", "before" if step == 0 else "after", step,
             sum(len(s.prompts) for s in run.evaluator.sets))
    result = run.evaluator.run(run.engine, run.scorer)
    log.info("eval: eval/scores=%.3g (%.1f s)", result.metrics.get("eval/scores", float("nan")),
             time.perf_counter() - start)
    run.scorer.metrics_since_last()  # eval verifier errors are not the step's (eval/ counts them)
    if run.traces is not None:
        run.traces.write_eval(step, [row for s in result.sets for row in eval_rows(
            step, s.name, [x for g in s.episodes.groups for x in g],
            [o for g in s.episodes.outcomes for o in g])])
    return {**result.metrics, "time/eval": time.perf_counter() - start}


def train(cfg: Config, start: StartPlan | None = None) -> Run:
    """Train for `cfg.num_training_steps` steps; returns the run (history, output dir).
    `start`: `plan_start`'s checks, made already by a launcher (`build_run`)."""
    run = build_run(cfg, start)
    try:
        if cfg.rewards.exploit_canary:  # before step 1: a verifier that pays a known exploit
            run_canary(run.scorer, verifiers_used(run.data),
                       format_reward=cfg.rewards.apply_r1_style_format_reward)
        if run.resume_from is not None:
            restore_state(run, run.resume_from)
        with StopOnSignal() as stop:
            _train_loop(run, stop)
            if cfg.checkpoint.save_final:
                # Still under StopOnSignal: a SIGTERM (a time limit, a preemption) now waits for
                # the final model, the run's only copy of its weights where it keeps no state,
                # instead of killing its write; the run is done once it is written.
                save_final_model(run.learner.policy, run.tokenizer, run.output_dir)
        if stop.signum is not None:
            log.warning("signal %d came after the last step: the final model was written "
                        "first", stop.signum)
    finally:
        run.close()
    return run


def _train_loop(run: Run, stop: StopOnSignal) -> None:
    cfg = run.cfg
    if run.start_step == 0:
        try:
            _log_start(run)
        except Exception as e:  # noqa: BLE001  re-raised unless the engine failed
            stop_if_engine_fault(run, run.start_step, e, step_done=True)
    streaks = Streaks()
    producer = _start_producer(run)
    try:
        for step in range(run.start_step + 1, cfg.num_training_steps + 1):
            at_start = step_start(run) if producer is None else None
            try:
                produced = _next_produced(run, producer, step, stop) if producer else None
                metrics = one_training_step(run, step, produced)
            except Exception as e:  # noqa: BLE001  re-raised unless the engine failed
                stop_if_engine_fault(run, step, e, at_start=at_start)
            try:
                _finish_step(run, stop, step, metrics, streaks)
            except Exception as e:  # noqa: BLE001  in the step's eval: the step itself is done
                stop_if_engine_fault(run, step, e, step_done=True)
    finally:
        if producer is not None:
            producer.close()
            run.producer = None


def _start_producer(run: Run) -> RolloutProducer | None:
    """The producer thread of an asynchronous run, handed the batches a resumed state made
    ahead (they come first, then it makes the next steps' from the restored mixer)."""
    k = run.cfg.rollout.async_steps
    saved = run.resume_from.ahead if run.resume_from is not None else ""
    made = ahead_from_json(saved) if saved else []
    if len(made) > k:
        raise ResumeRefused(
            f"the training state in {run.state_dir} holds {len(made)} batch(es) generated "
            f"ahead of training, more than rollout.async_steps={k} can take: resume with "
            f"rollout.async_steps >= {len(made)} (its prompts were drawn already), or start "
            "fresh in a new experiment.output_dir")
    if k == 0:
        return None
    # The step whose seed a batch uses: after those made before.
    steps = iter(range(run.start_step + 1 + len(made), 2**62))
    run.producer = RolloutProducer(lambda: run.source.produce(next(steps)), async_steps=k,
                                   mark=run.source.mixer_state, made=made)
    return run.producer


def _next_produced(run: Run, producer: RolloutProducer, step: int, stop: StopOnSignal
                   ) -> tuple[Episodes, dict[str, float]]:
    """The next batch fresh enough to train step `step` on (at most `async_steps` versions
    behind the policy). Bounded: the producer runs at most `async_steps` batches ahead, so a
    whole batch can only be stale if versions are miscounted; after a few such batches in a row
    this raises instead of drawing forever. A stop signal ends the wait at once."""
    k, dropped, waited = run.cfg.rollout.async_steps, 0, 0.0
    for attempt in range(MAX_STALE_BATCHES_IN_A_ROW):
        produced, wait_s = producer.next_batch(should_stop=lambda: stop.signum is not None)
        if produced is None:  # a stop signal arrived while waiting: save and leave
            stop_between_steps(run, stop, step - 1)
        waited += wait_s
        episodes, metrics = produced.item
        kept_groups, n_dropped = drop_stale_groups(episodes.groups, run.policy_version, k)
        dropped += n_dropped
        if kept_groups or not episodes.groups:
            break
        log.warning("step %d: a whole batch was more than %d versions stale (policy version "
                    "%d); drawing the next", step, k, run.policy_version)
        if stop.signum is not None:
            stop_between_steps(run, stop, step - 1)
    else:
        raise RuntimeError(
            f"step {step}: {MAX_STALE_BATCHES_IN_A_ROW} batches in a row were all more than "
            f"{k} versions behind the policy (version {run.policy_version}); the producer's "
            "bound should make this impossible, so the version bookkeeping is wrong")
    kept_ids = {id(g) for g in kept_groups}
    pairs = list(zip(episodes.groups, episodes.outcomes))
    # The stale groups of the batch trained on ride along for the traces (trained=false).
    stale = Episodes(groups=[g for g, _ in pairs if id(g) not in kept_ids],
                     outcomes=[o for g, o in pairs if id(g) not in kept_ids])
    kept = Episodes(groups=kept_groups, outcomes=[o for g, o in pairs if id(g) in kept_ids],
                    dropped_stale=stale, sampled_failure=episodes.sampled_failure)
    return kept, {**metrics, "async/stale_results_dropped": float(dropped),
                  "time/trainer_waiting_for_data": waited,
                  "time/generation_waiting_for_trainer": producer.blocked_since_last()}


MAX_STALE_BATCHES_IN_A_ROW = 4


def _finish_step(run: Run, stop: StopOnSignal, step: int, metrics: dict[str, float],
                 streaks: Streaks) -> None:
    """Eval, checkpoints, logging, the state and the streak checks after a step
    (`rlvr.run.stopping`)."""
    cfg = run.cfg
    if _due(cfg.eval.local_eval_every, step, cfg.num_training_steps):
        try:
            metrics.update(run_eval(run, step))
        except Exception as e:
            if engine_fault(e) is not None:  # the step trained and synced: keep its record
                run.logger.log(step, metrics)
            raise
    if cfg.checkpoint.save_freq and step % cfg.checkpoint.save_freq == 0:
        save_model_checkpoint(run.learner.policy, run.tokenizer, run.output_dir, step,
                              cfg.checkpoint.keep_last_n_checkpoints)
    if isinstance(run.engine, EngineGroup):  # engines lost and taken back (`engine_membership`)
        metrics.update(run.engine.membership_metrics())
    # Wall time since this process built the run: compares runs by reward per second.
    metrics["time/elapsed"] = time.perf_counter() - run.started
    run.logger.log(step, metrics)
    run.history.append({"training_step": step, **metrics})
    check_streaks(run, step, metrics, streaks)
    freq = cfg.checkpoint.checkpoint_state_freq
    due = (freq and step % freq == 0) or stop.signum is not None
    skipped = bool(metrics.get("optim/skipped_steps"))
    # A skipped update is never the "last good" state.
    if due and not skipped:
        save_state(capture_state(run, step, wait=stop.signum is None,
                                 should_stop=lambda: stop.signum is not None),
                   run.state_dir, cfg.checkpoint.keep_last_n_states)
    check_health(run, step, metrics, streaks)  # warnings, and stops (`rlvr.run.health`)
    if stop.signum is not None and step < cfg.num_training_steps:
        raise TrainingInterrupted(stop.signum, step, str(run.state_dir), saved=not skipped)


def _log_start(run: Run) -> None:
    """Step 0: data counts and the untrained model's eval, the baseline of the curve."""
    start = {"data/dropped_too_long": float(run.data.num_dropped_too_long),
             "data/bad_rows": float(run.data.num_bad_rows),
             # eval prompts also in the training set (a warning at load; `rlvr.data.overlap`)
             **{f"data/eval_overlap/{name}": float(n)
                for name, n in run.data.eval_overlap.items()}}
    if run.cfg.eval.eval_at_start and run.data.eval_prompts:
        start.update(run_eval(run, 0))
    start["time/elapsed"] = time.perf_counter() - run.started
    run.logger.log(0, {**start, "episode": 0.0})
    run.history.append({"training_step": 0, **start})


def _due(every: int, step: int, last: int) -> bool:
    """Every `every` steps, and always at the last step so a run ends with a measurement."""
    return every > 0 and (step % every == 0 or step == last)
