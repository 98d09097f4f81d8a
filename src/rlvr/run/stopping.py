"""How a run stops on purpose, with its last good state saved and a documented exit code
(docs/faults.md), instead of a traceback or a run that learns nothing and exits 0:
- the engine lost (`stop_if_engine_fault`): the state of the last step whose update the learner
  holds is saved, and a step whose update landed but whose weight sync failed keeps its record
  and model checkpoint (`UnsyncedStep`); exit 4;
- a stop signal between steps (`stop_between_steps`); exit 128 + N;
- streaks of steps that teach nothing (`Streaks`): non-finite gradients (exit 3) and every
  sample failing its verifier (`note_verification`; exit 5), both `check_streaks`; no
  learning signal at all, no sample with a non-zero advantage (`check_learning_signal`;
  exit 6);
- a health gate that marks the run as surely wasted (`check_health`, `rlvr.run.health`: engine
  and learner disagree on the logprobs of the same tokens); exit 9. The other gates warn.
What it is not: recognising an engine fault or a failed verification (`rlvr.run.faults`), the exit
codes (`rlvr.cli`), or taking the state (`rlvr.run.state`).
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass, field

from rlvr.run.build import Run
from rlvr.checkpoint import save_model_checkpoint
from rlvr.checkpoint.state import save_state
from rlvr.checkpoint.state import list_states
from rlvr.run.faults import engine_fault, in_chain, learner_fault, verification_failure
from rlvr.run.health import read_gates
from rlvr.run.errors import (EngineLost, LearnerLost, NoLearningSignal, NumericalFault,
    RunUnhealthy, TrainingInterrupted, VerifierFault)
from rlvr.run.interrupts import StopOnSignal
from rlvr.producer.groups import Episodes
from rlvr.run.state import capture_state, has_state

log = logging.getLogger(__name__)


def stop_if_engine_fault(run: Run, step: int, error: Exception, step_done: bool = False,
                         at_start: tuple[dict, dict] | None = None) -> None:
    """Re-raise `error`, unless an engine fault is behind it (`rlvr.run.faults.engine_fault`: no
    server left, one hung or answering garbage, an engine actor dead): then stop as
    `stop_after_engine_loss` does; or the prompts ran out (`NoLearningSignal` from the mixer:
    every prompt retired as solved): then the last good state is saved first, as for the
    engine."""
    fault = engine_fault(error)
    lost = learner_fault(error) if fault is None else None
    if lost is not None:  # its shards went with it: no state can be saved now
        # One line, as every fault's message: the ranks' reports joined, each cut short.
        reports = "; ".join(line.strip()[:300] for line in str(lost).splitlines() if line.strip())
        raise LearnerLost(f"step {step}: {reports}; {last_state_saved(run)}") from error
    if fault is None:
        exhausted = in_chain(error, NoLearningSignal)
        if exhausted is None:
            raise error
        where = save_last_good_state(run, step, step_done, at_start)
        raise NoLearningSignal(f"{exhausted}; {where}") from error
    if isinstance(error, UnsyncedStep):
        keep_unsynced_step(run, step, error.metrics)
    stop_after_engine_loss(run, step, fault, step_done, at_start)


class UnsyncedStep(Exception):
    """Step's update landed in the learner, but its weights never reached the engine (the
    engine fault is the cause): `metrics` is the step's record, for the log."""

    def __init__(self, metrics: dict[str, float]):
        super().__init__("the weight sync after the update failed")
        self.metrics = metrics


def keep_unsynced_step(run: Run, step: int, metrics: dict[str, float]) -> None:
    """Log the step whose sync failed and write its model checkpoint if one is due, as
    `rlvr.run.loop` does after a step (its eval cannot run: the engine is gone). The state saved next is
    this step's, so a resume starts after it: without this its record and checkpoint were
    lost for good."""
    cfg = run.cfg
    metrics = {**metrics, "weight_sync/failed": 1.0,
               "time/elapsed": time.perf_counter() - run.started}
    if cfg.checkpoint.save_freq and step % cfg.checkpoint.save_freq == 0:
        save_model_checkpoint(run.learner.policy, run.tokenizer, run.output_dir, step,
                              cfg.checkpoint.keep_last_n_checkpoints)
    run.logger.log(step, metrics)
    run.history.append({"training_step": step, **metrics})


def last_state_saved(run: Run) -> str:
    """Where a rerun resumes from: the last training state saved, or that none was."""
    states = list_states(run.state_dir)
    if states:
        return f"rerun the same command to resume from the last training state, {states[-1]}"
    return (f"no training state was saved in {run.state_dir} "
            "(checkpoint.checkpoint_state_freq saves them), so a rerun cannot resume")


def stop_after_engine_loss(run: Run, step: int, error: BaseException,
                           step_done: bool = False,
                           at_start: tuple[dict, dict] | None = None) -> None:
    """No engine is left (every inference server gone): save the last good state
    (`save_last_good_state`) and stop naming the servers and the state."""
    where = save_last_good_state(run, step, step_done, at_start)
    raise EngineLost(f"step {step}: {error}; {where}: start the servers again and rerun the "
                     "same command to resume") from error


def save_last_good_state(run: Run, step: int, step_done: bool = False,
                         at_start: tuple[dict, dict] | None = None) -> str:
    """Save the state of the last step whose update the learner holds, which is `step` itself
    when only the weight sync after its update failed or the step was done (`step_done`: its
    eval failed); say where it is. A state of `step - 1` starts from `at_start` (the mixer
    before `step` drew its prompts, so a resume draws them again), and one saved already for
    that step is kept as it is."""
    done = step if step_done or run.last_update_step == step else step - 1
    if done <= run.start_step:
        return f"no step finished since the last state in {run.state_dir}"
    if done == step and not step_done:  # the update landed; the engines never received it
        run.policy_version += 1
    if not (done == step - 1 and has_state(run, done)):
        save_state(capture_state(run, done, at_start=at_start if done == step - 1 else None),
                   run.state_dir, run.cfg.checkpoint.keep_last_n_states)
    return f"the training state of step {done} is in {run.state_dir}"


def stop_between_steps(run: Run, stop: StopOnSignal, last_step: int) -> None:
    """A stop signal arrived before step `last_step + 1` could train: save the state of the
    last finished step (its weights are the learner's now) and leave."""
    if last_step > run.start_step:
        save_state(capture_state(run, last_step), run.state_dir,
                   run.cfg.checkpoint.keep_last_n_states)
    raise TrainingInterrupted(stop.signum, last_step, str(run.state_dir))


def note_verification(run: Run, step: int, episodes: Episodes, metrics: dict[str, float]
                       ) -> None:
    """Count steps in a row whose every sample failed its verifier (`check_streaks` stops
    the run after `rewards.max_failed_steps` of them), warning at each."""
    # What the step sampled decides where the source says (active sampling keeps only groups
    # with reward spread, none of them where every sample failed); else what it trains on.
    failure = (episodes.sampled_failure
               or verification_failure(episodes, run.cfg.rewards.timeout_s))
    metrics["reward/all_samples_failed"] = float(failure is not None)
    if failure is None:
        run.failed_verification_steps, run.first_verifier_failure = 0, None
        return
    run.failed_verification_steps += 1
    run.first_verifier_failure = run.first_verifier_failure or failure
    log.warning("step %d: every sample failed its verifier (%s); %d such step(s) in a row, the "
                "run stops at rewards.max_failed_steps=%d", step, failure,
                run.failed_verification_steps, run.cfg.rewards.max_failed_steps)


QUIET_STEPS_WITHOUT_SIGNAL = 3  # steps in a row without signal logged at INFO before a WARNING


@dataclass
class Streaks:
    """Steps in a row that taught nothing, as `check_streaks` counts them."""

    nonfinite: int = 0  # updates skipped for non-finite gradients
    without_signal: int = 0  # steps with no sample of non-zero advantage
    rewards_without_signal: list[float] = field(default_factory=list)  # their mean rewards


def check_streaks(run: Run, step: int, metrics: dict[str, float], streaks: Streaks) -> None:
    """Count non-finite updates with step `step`'s metrics, and stop the run at the limit of
    those or of failed verifications (`note_verification` counts them). Called before the
    step's state is saved: no state is saved for such steps, the last good one stays the
    latest."""
    cfg = run.cfg
    streaks.nonfinite = streaks.nonfinite + 1 if metrics.get("optim/skipped_steps") else 0
    if streaks.nonfinite >= cfg.optimizer.max_consecutive_skipped_steps:
        raise NumericalFault(
            f"non-finite gradients in {streaks.nonfinite} consecutive steps (up to step "
            f"{step}); the last good training state is in {run.state_dir}")
    if run.failed_verification_steps >= cfg.rewards.max_failed_steps:
        raise VerifierFault(
            f"every sample failed its verifier in {run.failed_verification_steps} steps in a "
            f"row (up to step {step}; rewards.max_failed_steps={cfg.rewards.max_failed_steps}), "
            f"so the run cannot learn; the first failure: {run.first_verifier_failure}. Fix the "
            f"verifier and rerun; the last good training state is in {run.state_dir}")


def check_learning_signal(run: Run, step: int, metrics: dict[str, float],
                          streaks: Streaks) -> None:
    """Count steps in a row without learning signal and stop the run at
    `algorithm.max_steps_without_update`. Such a step is a good state (its weights are those
    of the last update): saved before stopping, so nothing is lost."""
    cfg = run.cfg
    if metrics.get("batch/learning_signal", 1.0):
        streaks.without_signal, streaks.rewards_without_signal = 0, []
        return
    streaks.without_signal += 1
    streaks.rewards_without_signal.append(metrics.get("objective/verifiable_reward", 0.0))
    limit = cfg.algorithm.max_steps_without_update
    # One such step now and then is normal (a batch of solved prompts); a streak is not.
    log.log(logging.WARNING if streaks.without_signal >= QUIET_STEPS_WITHOUT_SIGNAL
            else logging.INFO,
            "step %d: no sample had a non-zero advantage (every group's rewards were equal), "
            "so nothing was learnt; %d such step(s) in a row%s", step, streaks.without_signal,
            f", the run stops at algorithm.max_steps_without_update={limit}" if limit else "")
    if limit and streaks.without_signal >= limit:
        if not has_state(run, step):
            save_state(capture_state(run, step), run.state_dir,
                       cfg.checkpoint.keep_last_n_states)
        raise NoLearningSignal(_no_signal_message(run, step, streaks, limit))


def _no_signal_message(run: Run, step: int, streaks: Streaks, limit: int) -> str:
    rewards = streaks.rewards_without_signal
    if max(rewards) <= 0.0:
        why = ("no sample earned any reward: the task is too hard for the model, or its "
               "answers never reach the verifier in the form it reads (the prompt's format, "
               "answer tags, the chat template); the traces show what it wrote")
    elif min(rewards) >= 1.0:
        why = "every sample earned the full reward: the data is solved for this model"
    else:
        why = (f"each prompt's samples all scored alike (mean reward "
               f"{sum(rewards) / len(rewards):.3g}): more samples per prompt "
               "(rollout.num_samples_per_prompt_rollout) or other data")
    return (f"no learning signal in {streaks.without_signal} steps in a row (up to step "
            f"{step}; algorithm.max_steps_without_update={limit}): {why}. The training state "
            f"of step {step} is in {run.state_dir}; to go on regardless, rerun with a higher "
            "algorithm.max_steps_without_update (0: never stop)")


def check_health(run: Run, step: int, metrics: dict[str, float], streaks: Streaks) -> None:
    """The run's health after step `step`, its row the last of `run.history`: the
    learning-signal stop (`check_learning_signal`), then every gate of `rlvr.run.health`, each
    crossed one a warning, and a gate that marks the run as wasted a stop with the step's
    state saved (`RunUnhealthy`, exit 9). Called once per step, after the state due is saved."""
    check_learning_signal(run, step, metrics, streaks)
    cfg = run.cfg
    findings = read_gates(cfg.health, run.history, cfg.rollout.num_samples_per_prompt_rollout)
    for finding in findings:
        if not finding.stop:
            log.warning("step %d: health: %s", step, finding.message)
    stop = next((f for f in findings if f.stop), None)
    if stop is None:
        return
    skipped = bool(metrics.get("optim/skipped_steps"))  # never the "last good" state
    if not skipped and not has_state(run, step):
        save_state(capture_state(run, step), run.state_dir, cfg.checkpoint.keep_last_n_states)
    where = (last_state_saved(run) if skipped
             else f"the training state of step {step} is in {run.state_dir}")
    raise RunUnhealthy(
        f"step {step}: {stop.message}. The run stops (health gate '{stop.gate}', "
        f"health.stop_after_steps={cfg.health.stop_after_steps}); {where}. Fix the cause and "
        "rerun to resume; to go on regardless, raise the bound named (health.enabled=false "
        "reads no gate)", stop.gate)
