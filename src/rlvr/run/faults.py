"""Recognising the faults that end a run on purpose, so the trainer can stop with its last good
state and a documented exit code (docs/faults.md) instead of a traceback or a run that learns
nothing:
- `engine_fault`: the error behind a failed step that means the engine is gone or unusable (no
  server left, a server hung past its timeout or answering garbage, an engine actor dead),
  wherever it sits in the exception's chain (a workflow wraps an episode's error);
- `verification_failure`: a step whose every sample failed its verifier (an error or a time
  limit): such a step teaches nothing, and several in a row are a broken verifier.
What it is not: the stopping itself (`rlvr.run.loop`), or the exit codes (`rlvr.cli`).
"""

from __future__ import annotations

from rlvr.distributed.engine_group import EngineGroupError
from rlvr.distributed.learner_group import LearnerGroupError
from rlvr.run.errors import EngineUnavailable
from rlvr.producer.groups import Episodes
from rlvr.serving.client import ServerError

# An inference server that failed a request on every retry (hung past
# rollout.server_request_timeout_s, or answering what cannot be read), no server left, or an
# engine actor that raised or died.
ENGINE_FAULTS = (EngineUnavailable, ServerError, EngineGroupError)


def learner_fault(error: BaseException) -> BaseException | None:
    """A learner rank's failure in `error`'s chain (`LearnerGroupError`), or None."""
    return in_chain(error, LearnerGroupError)


def engine_fault(error: BaseException) -> BaseException | None:
    """The engine fault in `error`'s chain (itself, its cause or its context), or None."""
    return in_chain(error, ENGINE_FAULTS)


def in_chain(error: BaseException | None, kinds: type | tuple[type, ...]
             ) -> BaseException | None:
    """The first error of `kinds` in `error`'s chain (itself, its cause or its context; a
    workflow or the producer thread wraps the error it met), or None."""
    seen: set[int] = set()
    while error is not None and id(error) not in seen:
        if isinstance(error, kinds):
            return error
        seen.add(id(error))
        error = error.__cause__ or error.__context__
    return None


def verification_failure(episodes: Episodes, timeout_s: float) -> str | None:
    """When every sample of the step failed its verifier, the first failure ("name: error",
    or which verifiers timed out); None when any sample was scored, or there are none."""
    pairs = [(sample, outcome) for group, outcomes in zip(episodes.groups, episodes.outcomes)
             for sample, outcome in zip(group, outcomes)]
    if not pairs or any(o.error is None and not o.timed_out for _, o in pairs):
        return None
    sample, outcome = pairs[0]
    if outcome.timed_out:
        return (f"{', '.join(sample.prompt.verifiers)}: timed out after {timeout_s:g} s "
                "(rewards.timeout_s)")
    return outcome.error
