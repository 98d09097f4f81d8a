"""A run's training state, taken and put back: `capture_state` after a step (the learner's
weights and optimizer, the mixer's position, the RNG, the batches made ahead), `restore_state`
at a resume, and `sync_weights`, which hands the learner's weights to the engines as a policy
version. What it is not: when a state is saved (`rlvr.run.loop`, `rlvr.run.stopping`) or how it is
written and read (`rlvr.checkpoint.state`).
"""

from __future__ import annotations

import logging
from typing import Callable

from rlvr.run.build import Run
from rlvr.checkpoint.resume import fresh_start_hint
from rlvr.checkpoint.state import (TrainingState, capture_rng, list_states, restore_rng)
from rlvr.rollout import weight_sync
from rlvr.run.errors import ResumeRefused
from rlvr.producer.ahead_state import ahead_to_json

log = logging.getLogger(__name__)


def sync_weights(run: Run, version: int) -> None:
    """Learner -> engines, as policy version `version` (`rlvr.rollout.weight_sync`, which
    picks the path)."""
    weight_sync.sync_weights(run.learner, run.engine, version)
    run.policy_version = version


def restore_state(run: Run, state: TrainingState) -> None:
    try:
        if state.learner_dir is not None:  # written sharded: each rank reads what it needs
            extra = run.learner.load_sharded_state(state.learner_dir)
            if extra.get("step") != state.step:
                raise ValueError(f"its learner part is of step {extra.get('step')}")
        else:
            run.learner.load_training_state({
                "policy": state.policy, "reference": state.reference,
                "optimizer": state.optimizer, "scheduler": state.scheduler})
    except (KeyError, ValueError, RuntimeError) as e:
        # Every learner writes one format keyed by parameter name, so any launcher can load
        # it; what fails here is a state of another model or config.
        raise ResumeRefused(
            f"the training state in {run.state_dir} (step {state.step}) does not fit this "
            f"run's model and optimizer (or was written by an older rlvr whose local launcher "
            f"keyed the optimizer by index): {e}. {fresh_start_hint(run.output_dir)}") from e
    run.source.load_mixer_state(state.mixer)
    restore_rng(state.rng)
    run.episode, run.start_step = state.episode, state.step
    sync_weights(run, state.policy_version)
    log.info("resumed from the training state of step %d in %s", state.step, run.state_dir)


def capture_state(run: Run, step: int, wait: bool = False,
                  should_stop: Callable[[], bool] | None = None,
                  at_start: tuple[dict, dict] | None = None) -> TrainingState:
    """The run's state after step `step`. With `checkpoint.state_format=sharded` the learner's
    part is not gathered here: `save_state` has the learner's ranks write their shards into
    the state directory it builds (which every rank must be able to reach).
    `at_start`: the mixer's and the RNG's states as step `step + 1` began (`step_start`), for
    a synchronous run that stops inside that step: it drew that step's prompts already, and a
    resume must draw them again.

    An asynchronous run's state also holds the batches made ahead (`RolloutProducer.ahead`),
    with the mixer's state from before the first batch not made; `wait`: first let a batch in
    the making finish (until `should_stop()`), so that a resume repeats this run exactly."""
    learner = run.learner
    if at_start is not None:
        (mixer, rng), ahead = at_start, ""
    else:
        (mixer, ahead), rng = _mixer_and_ahead(run, step, wait, should_stop), capture_rng()
    common = dict(step=step, episode=run.episode, mixer=mixer, rng=rng,
                  policy_version=run.policy_version, ahead=ahead)
    if run.cfg.checkpoint.state_format == "sharded":
        # The step goes in as the learner's `extra`: a check, on resume, that the parts agree.
        return TrainingState(**common, policy={}, reference=None, optimizer={}, scheduler={},
                             write_learner=lambda d: learner.save_sharded_state(d, {"step": step}))
    return TrainingState(**common, **learner.training_state())


def _mixer_and_ahead(run: Run, step: int, wait: bool,
                     should_stop: Callable[[], bool] | None) -> tuple[dict, str]:
    """The mixer's state a resume starts from, and the batches made ahead as JSON ("": none)."""
    if run.producer is None:
        return run.source.mixer_state(), ""
    ahead = run.producer.ahead(wait=wait, should_stop=should_stop)
    if ahead.failed:
        log.warning("the training state of step %d holds %d batch(es) made ahead; the next "
                    "one failed, so a run resumed from it makes that batch again, from the "
                    "same prompts", step, len(ahead.made))
    elif not ahead.complete:
        log.warning("the training state of step %d holds %d batch(es) made ahead; one was "
                    "still being made, so a run resumed from it makes that batch again with "
                    "newer weights and departs from this one there", step, len(ahead.made))
    return ahead.mark, ahead_to_json(ahead.made)


def step_start(run: Run) -> tuple[dict, dict]:
    """The mixer's and the RNG's states before a synchronous step draws its prompts: the
    state of the step before, should this one stop half way (`rlvr.run.stopping`)."""
    return run.source.mixer_state(), capture_rng()


def has_state(run: Run, step: int) -> bool:
    """Whether the run saved a training state of `step` (at its end, by its state frequency)."""
    return any(p.name == f"step_{step:06d}" for p in list_states(run.state_dir))
