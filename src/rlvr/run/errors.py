"""The exceptions that end a run on purpose, each with its documented exit code (docs/faults.md)
chosen by `rlvr.cli`. A leaf module: it imports nothing of rlvr, so any part may raise these
without importing the loop.
"""

from __future__ import annotations

import signal


class TrainingInterrupted(Exception):
    """A signal stopped the run after `step`. `saved`: that step's training state was saved; a
    step whose update was skipped (non-finite gradients) saves none, and the rerun resumes from
    the last good state before it."""

    def __init__(self, signum: int, step: int, state_dir: str, saved: bool = True):
        self.signum, self.step, self.state_dir = signum, step, state_dir
        name = signal.Signals(signum).name
        where = (f"training state saved in {state_dir}" if saved else
                 f"its update was skipped (non-finite gradients), so no state of it was saved: "
                 f"the last good training state in {state_dir} is resumed")
        super().__init__(f"stopped by {name} after step {step}; {where}: rerun the same command "
                         "to resume")

    @property
    def exit_code(self) -> int:
        return 128 + self.signum  # the shell's convention for death by signal


class NumericalFault(RuntimeError):
    """Too many updates in a row had non-finite gradients."""


class ResumeRefused(ValueError):
    """The run directory holds an earlier run this run cannot continue (no state of it loads,
    or none was saved); the message says why and how to start fresh (`rlvr.checkpoint.resume`)."""


class RunFinished(Exception):
    """The run directory holds this run, finished: there is nothing to train."""


class VerifierFault(RuntimeError):
    """Every sample failed its verifier (an error or a time limit) in `rewards.max_failed_steps`
    steps in a row: the run cannot learn; the message names the verifier and its first error."""


class NoLearningSignal(RuntimeError):
    """No sample had a non-zero advantage in `algorithm.max_steps_without_update` steps in a
    row (every group's rewards equal): the run cannot learn; its state is saved, and the
    message says why the rewards may be flat."""


class RunUnhealthy(RuntimeError):
    """A health gate that marks a run as surely wasted (`rlvr.run.health`: the engine samples from
    another policy than the learner trains) held for `health.stop_after_steps` steps; the
    state is saved, and the message names the signal, its value, its bound and the causes."""

    def __init__(self, message: str, gate: str):
        super().__init__(message)
        self.gate = gate


class LearnerLost(RuntimeError):
    """A learner rank failed (raised, died or timed out): its shards are gone, so no state can
    be saved; the message names the rank's report and the last state saved before."""


class EngineUnavailable(RuntimeError):
    """No engine is left to generate with (every inference server dropped, or none reachable):
    a failure of the run, not of an episode; the trainer stops with its last good state."""


class EngineLost(RuntimeError):
    """Generation has nowhere to run (every inference server gone); the last good training
    state was saved first, and the message says where."""


class SaveFailed(RuntimeError):
    """Writing a training state, a model checkpoint or the final model failed (disk full, a
    quota, an I/O error): its half-written copy was removed, the saves before it are kept, and
    the message names the path, the error and what is left to resume from
    (`rlvr.checkpoint.atomic.save_dir_atomic`)."""


class SlurmJobFailed(RuntimeError):
    """A run's Slurm job (`distributed.launcher=slurm`) ended with a non-zero exit code, or
    without one; `exit_code` is what `rlvr train` exits with (the trainer's own when it ran)."""

    def __init__(self, message: str, exit_code: int):
        super().__init__(message)
        self.exit_code = exit_code
