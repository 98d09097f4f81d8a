"""Calling one method on every actor of a Ray group, and failing the group as one.

Learner ranks, engine actors and the data-preparation actor share one failure rule: the first
actor that raises, dies or misses its deadline fails the call. The group then reports every
actor's error, a dead process first (it is the cause; its peers' "connection closed" errors are
symptoms), kills every actor and refuses further calls, so a run stops loudly instead of
hanging. `ActorGroup` holds that rule once; each caller brings its own error type and names its
actors ("learner rank", "engine actor").

Not here: starting or placing actors (the callers do, with their own resources), what the
methods do, and in-process backends, which call plain objects. Ray is imported inside the
methods, so code that never starts actors does not need it installed.
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass
from typing import Any, Callable, Mapping, NoReturn, Sequence

log = logging.getLogger(__name__)

# After a collective group's first error, how long its other actors get to report their own
# (a dead peer makes them raise within the collective timeout, usually at once).
_PEER_ERROR_GRACE_S = 5.0

Refs = Mapping[int, Any]  # an actor's position in the group -> the ObjectRef of its call


@dataclass(frozen=True)
class ActorFailure:
    """One actor's part in a failed call."""

    index: int  # the actor's position in the group
    died: bool  # its process is gone (a RayActorError): the likely cause of the others' errors
    error: str  # "Type: message"; a RayTaskError's message holds the actor's own traceback


class ActorGroup:
    """Ray actors that succeed or fail together.

    `call` (or `submit`, then `wait`) returns every actor's result or raises `error_type`
    naming each failed actor with its error; the actors are then killed and every later call
    raises `error_type` too. `kill` stops them without a failure (a clean close).
    """

    def __init__(self, actors: Sequence[Any], name: str, member: str,
                 error_type: type[Exception], peers_timeout_s: float | None = None,
                 on_kill: Callable[[], None] | None = None):
        """`name`: the group in messages ("learner group"); `member`: one actor ("learner
        rank"), numbered by its position in `actors`.

        `peers_timeout_s` is for actors that run collectives together (learner ranks). Once one
        has finished a call, the others have only local work left, so they get that long more
        (while all run there is no deadline: a step may legitimately take long, and a rank
        stuck in a collective raises after its own timeout). After a failure they get a few
        seconds to report their own errors, and one still running counts as failed. Without it
        (independent actors: engines) a call waits only for its own `timeout_s`, and after a
        failure the actors still running are stopped, not blamed.

        `on_kill`: what else to release once the actors are killed (a placement group)."""
        self.name, self.member, self.error_type = name, member, error_type
        self.peers_timeout_s = peers_timeout_s
        self.failure: str | None = None  # the first failure; calls are refused after it
        self._actors = list(actors)
        self._on_kill = on_kill

    def live(self) -> list[Any]:
        """The actor handles, or `error_type` once the group failed or was killed."""
        if self.failure is not None:
            raise self.error_type(f"the {self.name} failed earlier and is closed: "
                                  f"{self.failure}")
        if not self._actors:
            raise self.error_type(f"the {self.name} is closed")
        return list(self._actors)

    def call(self, method: str, args_per_actor: Sequence[tuple | None], what: str | None = None,
             timeout_s: float | None = None) -> list[Any]:
        """`method(*args)` on every actor, the results in actor order; None args skip an actor
        (not for collectives). `what` names the call in errors (default: `method`);
        `timeout_s` bounds the whole call (None: no deadline of its own)."""
        return self.wait(self.submit(method, args_per_actor), what or method, timeout_s)

    def submit(self, method: str, args_per_actor: Sequence[tuple | None]) -> dict[int, Any]:
        """Start `method(*args)` on every actor whose args are not None; `wait` for the refs
        (a caller may do its own part of a joint call in between)."""
        actors = self.live()
        if len(args_per_actor) != len(actors):
            raise ValueError(f"{len(args_per_actor)} argument tuples for {len(actors)} "
                             f"{self.member}s (None skips one)")
        return {i: getattr(actor, method).remote(*args)
                for i, (actor, args) in enumerate(zip(actors, args_per_actor))
                if args is not None}

    def wait(self, refs: Refs, what: str, timeout_s: float | None = None) -> list[Any]:
        """The results of `submit`'s calls in actor order, or `error_type` at the first
        failure, raised once every actor's error is collected and the actors are killed."""
        import ray

        index_of = {ref: i for i, ref in refs.items()}
        results: dict[int, Any] = {}
        pending = list(refs.values())
        deadline = None if timeout_s is None else time.monotonic() + timeout_s
        late = f"did not finish within {timeout_s:.0f} s" if timeout_s is not None else ""
        peers_started = False
        while pending:
            left = None if deadline is None else max(0.0, deadline - time.monotonic())
            ready, pending = ray.wait(pending, num_returns=1, timeout=left)
            if not ready:
                self._fail(what, [ActorFailure(index_of[r], False, late) for r in pending],
                           timed_out=True)
            for ref in ready:
                try:
                    results[index_of[ref]] = ray.get(ref)
                except Exception:  # noqa: BLE001 - reported with every other actor's error
                    peers = self.peers_timeout_s is not None
                    failures, running = self._collect(
                        refs, _PEER_ERROR_GRACE_S if peers else 0.0)
                    if peers:  # a collective's peers wait for the failed one forever
                        failures += [ActorFailure(i, False, "still running when the group was "
                                                            "stopped") for i in running]
                    self._fail(what, failures)
            if self.peers_timeout_s is not None and not peers_started:  # the first finished
                peers_started = True
                peers_deadline = time.monotonic() + self.peers_timeout_s
                if deadline is None or peers_deadline < deadline:
                    deadline = peers_deadline
                    late = (f"did not finish within {self.peers_timeout_s:.0f} s of the first "
                            f"{self.member}")
        return [results[i] for i in sorted(results)]

    def abandon(self, refs: Refs, what: str, reason: str, grace_s: float) -> None:
        """This process's own part of a joint call failed (it was the weight sender, say):
        stop the actors, which would wait for it forever. An actor's error names the cause
        better (its death may be why this process failed), so if one comes within `grace_s`
        raise `error_type` with it; otherwise record `reason` and return, for the caller to
        re-raise its own error."""
        failures, waiting = self._collect(refs, grace_s) if refs else ([], [])
        if failures:
            self._fail(what, failures)
        if waiting:  # alive but not done: the peers the joint call waited on (a hung receiver)
            reason += (f"; {self.member} {', '.join(map(str, waiting))} had not finished its "
                       f"part of the {what}")
        self.failure = reason
        log.error("%s; stopping the %s", reason, self.name)
        self.kill()

    def close(self, method: str | None = None, timeout_s: float = 30.0) -> None:
        """Stop the actors: first `method()` on each (their own clean-up, waited for at most
        `timeout_s`, errors ignored), then kill them. Safe to call twice and after a failure."""
        import ray

        if method is not None and self._actors:
            refs = [getattr(actor, method).remote() for actor in self._actors]
            ray.wait(refs, num_returns=len(refs), timeout=timeout_s)
            for ref in refs:
                try:
                    ray.get(ref, timeout=0)
                except Exception as e:  # noqa: BLE001  stopping anyway
                    log.debug("%s %s: %s", self.member, method, e)
        self.kill()

    def kill(self) -> None:
        """Kill every actor at once (no clean-up in them); later calls raise `error_type`."""
        import ray

        for actor in self._actors:
            ray.kill(actor, no_restart=True)
        self._actors = []
        if self._on_kill is not None:
            self._on_kill()

    # ---- failing ---------------------------------------------------------------------------

    def fail(self, what: str, failures: list[ActorFailure]) -> NoReturn:
        """Fail the group with `failures` a caller found itself (calls it made outside
        `submit`, as `engine_membership` deals a generation's shares)."""
        self._fail(what, failures)

    def _collect(self, refs: Refs, grace_s: float) -> tuple[list[ActorFailure], list[int]]:
        """After waiting up to `grace_s` for the calls still running: each failed actor's
        error, and the positions of the actors whose call is still running."""
        import ray

        ray.wait(list(refs.values()), num_returns=len(refs), timeout=grace_s)
        failures, running = [], []
        for i, ref in refs.items():
            try:
                ray.get(ref, timeout=0)
            except ray.exceptions.GetTimeoutError:
                running.append(i)
            except Exception as e:  # noqa: BLE001
                died = isinstance(e, ray.exceptions.RayActorError)
                failures.append(ActorFailure(i, died, f"{type(e).__name__}: {e}"))
        return failures, running

    def _fail(self, what: str, failures: list[ActorFailure],
              timed_out: bool = False) -> NoReturn:
        """Record the failure, kill every actor and raise `error_type` with each failure, the
        dead processes first."""
        import ray

        order = sorted(failures, key=lambda f: (not f.died, f.index))
        indices = [f.index for f in order]
        # "engine actor 1" for one, "learner rank(s) [1, 0]" for several (logs and tests match
        # both forms)
        where = (f"{self.member} {indices[0]}" if len(indices) == 1
                 else f"{self.member}(s) {indices}")
        self.failure = f"{what} failed on {where}"
        log.error("%s; stopping the %s", self.failure, self.name)
        self.kill()
        lines = [f"--- {self.member} {f.index}: {f.error}" for f in order]
        if timed_out:  # often an actor Ray could not place: say what the cluster has
            lines.append(f"cluster resources: {ray.cluster_resources()}, free: "
                         f"{ray.available_resources()}")
        raise self.error_type(f"{self.failure}; the {self.name} was stopped.\n"
                              + "\n".join(lines)) from None
