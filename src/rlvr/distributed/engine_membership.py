"""Which engine actors are alive, and what an engine group does when one is lost or room returns.

On a Ray cluster a node holding engines can disappear while the learners and other engines run
on. `EngineMembership` keeps the live engine actors, each with the node it runs on, and:
- runs a generation's shares on them (`run_shares`): the shares stay as many as the configured
  engines, each with its own seed, and are dealt round-robin over the live engines, so a lost
  engine's shares are redone on the others with the same seeds and the step's samples are
  those of an undisturbed run;
- counts a lost engine once (`lose`): one warning line naming its node, and the
  `engines/lost_total` metric;
- at a weight-sync point starts new engine actors, up to the configured count, where Ray has
  room (`refill`), so they receive the current weights before they generate.
Every change of membership means a new weight broadcast group (a torch.distributed group with a
dead member cannot be reused): `take_change` says so, and the group forms a new one at its next
sync. New engines generate only once a push has reached them (`weights_loaded`).

Only an actor's death (its process or its node gone: a `RayActorError`) is a loss. An engine
that raises still fails the whole group (`actor_calls.ActorGroup`), and losing the last engine
is `EngineGroupError` as before, which stops the run (exit 4, docs/faults.md).
Not here: the broadcast itself (`rlvr.rollout.weight_sync`), the engines' work (`EngineWorker`).
Ray is imported inside the functions.
"""

from __future__ import annotations

import logging
import threading
import time
from dataclasses import dataclass
from typing import Any, Callable

log = logging.getLogger(__name__)

# After an engine failed to start, no start is tried for this many of the group's timeouts.
_RETRY_AFTER_TIMEOUTS = 5


@dataclass(eq=False)  # one actor is one engine: compared by identity
class EngineActor:
    """One live engine actor and where it runs (for the lost-node warning)."""

    handle: Any
    node_id: str
    node_ip: str
    # False from its start until its first weight push lands: it generates nothing before
    # (a generation may run beside a sync when rollout.async_steps > 0).
    has_weights: bool = True

    def where(self) -> str:
        return f"node {self.node_id[:12]} ({self.node_ip})"


class EnginesLost(RuntimeError):
    """Engines died during a call (a weight push, say); those left form a new group."""


def died(error: BaseException) -> bool:
    """Whether `error` (from `ray.get`) means the actor's process or node is gone."""
    import ray

    return isinstance(error, ray.exceptions.RayActorError)


class EngineMembership:
    """The live engines of a group, `target` of them when all is well. Safe to use from the
    trainer's thread and a producer thread at once (a lock guards the list).

    `start(n)` starts n new engine actors (not waited for); `locate(handles, timeout_s)`
    returns each actor's (node id, node IP) once it is ready, or the error that kept it."""

    def __init__(self, engines: list[EngineActor], target: int,
                 start: Callable[[int], list], locate: Callable[[list, float], list],
                 resources_per_engine: dict[str, float], timeout_s: float):
        self.engines, self.target = list(engines), target
        self._start, self._locate = start, locate
        self.resources_per_engine, self.timeout_s = resources_per_engine, timeout_s
        self.lost_total = 0  # engines lost since the run started
        self.joined_total = 0  # engines started after a loss
        self._changed = False  # membership moved since the broadcast group formed
        self._retry_after = 0.0  # monotonic time before which no start is tried again
        self._lock = threading.RLock()

    @property
    def handles(self) -> list:
        with self._lock:
            return [e.handle for e in self.engines]

    def take_change(self) -> list | None:
        """The live handles if the membership moved since the last call, else None."""
        with self._lock:
            if not self._changed:
                return None
            self._changed = False
            return [e.handle for e in self.engines]

    def weights_loaded(self) -> None:
        """A push reached every live engine: the new ones may generate now."""
        with self._lock:
            for e in self.engines:
                e.has_weights = True

    def metrics(self) -> dict[str, float]:
        with self._lock:
            return {"engines/live": float(len(self.engines)),
                    "engines/lost_total": float(self.lost_total),
                    "engines/joined_total": float(self.joined_total)}

    # ---- losing engines ----------------------------------------------------------------------

    def lose(self, handles: list, what: str, error: str) -> None:
        """Drop the engines of `handles` (their actors died during `what`), warning once for
        each with its node; one dropped already (found by another call) is not counted again."""
        with self._lock:
            gone = [e for e in self.engines if any(e.handle is h for h in handles)]
            left = len(self.engines) - len(gone)
            for i, e in enumerate(self.engines):
                if e not in gone:
                    continue
                log.warning("engine actor %d on %s was lost during %s (%s); %s", i,
                            e.where(), what,
                            error.splitlines()[0][:200],
                            f"{left} engine(s) of {self.target} left, its work is redone on "
                            "them" if left else "no engine is left")
            self.engines = [e for e in self.engines if e not in gone]
            self.lost_total += len(gone)
            self._changed = self._changed or bool(gone)

    def run_shares(self, method: str, shares: list[tuple], what: str,
                   on_error: Callable[[Any, str], None]) -> list[Any]:
        """`method(*share)` for every share, dealt round-robin over the live engines that
        hold the weights; a share whose engine died is dealt again over those left, until
        every share is done. Returns the results in share order. `on_error(handle, error)`
        handles an engine that raised (it fails the group: it must raise). With no engine
        left, raises `EnginesLost`."""
        import ray

        results: dict[int, Any] = {}
        while len(results) < len(shares):
            with self._lock:
                pool = [e for e in self.engines if e.has_weights] or list(self.engines)
            if not pool:
                raise EnginesLost(f"every engine was lost during {what}")
            todo = [k for k in range(len(shares)) if k not in results]
            owner = {k: pool[n % len(pool)] for n, k in enumerate(todo)}
            refs = {getattr(owner[k].handle, method).remote(*shares[k]): k for k in todo}
            dead: dict[int, str] = {}  # id of the engine -> its error
            for ref, k in refs.items():  # every call ends: a dead actor's raises
                try:
                    results[k] = ray.get(ref)
                except Exception as e:  # noqa: BLE001
                    if not died(e):
                        on_error(owner[k].handle, f"{type(e).__name__}: {e}")
                    dead.setdefault(id(owner[k]), f"{type(e).__name__}: {e}")
            if dead:
                self.lose([e.handle for e in pool if id(e) in dead], what,
                          next(iter(dead.values())))
        return [results[k] for k in range(len(shares))]

    def dead_among(self, refs: dict[int, Any], grace_s: float) -> dict[int, str]:
        """Of calls `refs` (engine position -> ref), those whose actor died, with the error,
        waiting up to `grace_s` for the calls still running."""
        import ray

        ray.wait(list(refs.values()), num_returns=len(refs), timeout=grace_s)
        dead = {}
        for i, ref in refs.items():
            try:
                ray.get(ref, timeout=0)
            except Exception as e:  # noqa: BLE001  only deaths matter here
                if died(e):
                    dead[i] = f"{type(e).__name__}: {e}"
        return dead

    def check_alive(self) -> None:
        """Drop engines whose node Ray reports dead (found before a sync, not in its middle)."""
        import ray

        alive = {n["NodeID"] for n in ray.nodes() if n.get("Alive")}
        gone = [e.handle for e in self.engines if e.node_id not in alive]
        if gone:
            self.lose(gone, "a weight sync's check of the nodes", "Ray reports the node dead")

    # ---- taking engines back -----------------------------------------------------------------

    def refill(self) -> int:
        """Start engines up to `target` where Ray has room now, and keep those that are ready
        within the group's timeout; returns how many joined. Called at a weight-sync point, so
        they receive the current weights before they generate."""
        import ray

        with self._lock:
            missing = self.target - len(self.engines)
        if missing <= 0 or time.monotonic() < self._retry_after:
            return 0
        count = min(missing, _room(ray.available_resources(), self.resources_per_engine))
        if count <= 0:
            return 0
        started = time.monotonic()
        handles = self._start(count)
        joined = []
        for handle, place in zip(handles, self._locate(handles, self.timeout_s)):
            if isinstance(place, Exception):
                # Each try may wait out the timeout (room Ray counted but could not give): not
                # at every step.
                self._retry_after = time.monotonic() + _RETRY_AFTER_TIMEOUTS * self.timeout_s
                log.warning("a new engine actor did not start (%s); trying again in %.0f s",
                            str(place).splitlines()[0][:200],
                            _RETRY_AFTER_TIMEOUTS * self.timeout_s)
                ray.kill(handle, no_restart=True)
                continue
            joined.append(EngineActor(handle, *place, has_weights=False))
        with self._lock:
            for e in joined:
                log.warning("engine actor %d started on %s in %.1f s (Ray had room again); it "
                            "receives the current weights before it generates",
                            len(self.engines), e.where(), time.monotonic() - started)
                self.engines.append(e)
            self.joined_total += len(joined)
            self._changed = self._changed or bool(joined)
        return len(joined)


def _room(available: dict[str, float], per_engine: dict[str, float]) -> int:
    """How many more engines of `per_engine` resources fit in what Ray has free."""
    asked = {k: v for k, v in per_engine.items() if v > 0}
    if not asked:
        return 0
    return int(min(available.get(k, 0.0) // v for k, v in asked.items()))
