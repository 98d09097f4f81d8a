"""`ActorGroup` on tiny Ray actors: results in actor order, one actor's raise or death failing the
whole call (the dead one named first), the deadlines, and the group refusing calls afterwards."""

from __future__ import annotations

import os
import time

import pytest

from rlvr.distributed.actor_calls import ActorGroup


class ToyError(RuntimeError):
    pass


def _toy_class() -> type:
    """An actor with one method that returns, sleeps, raises (after `value` seconds) or kills
    its own process, as told. Defined in a function so Ray ships the class itself: an actor
    then starts without importing this module, and with it torch (seconds per actor)."""

    class Toy:
        def act(self, action: str, value: float = 0.0) -> float:
            if action == "die":
                os._exit(3)
            time.sleep(value)
            if action == "raise":
                raise ValueError(f"toy failure after {value} s")
            return value

    return Toy


def _group(ray, n: int, **kw) -> ActorGroup:
    """`n` started actors: timings below measure the calls, not the processes' start."""
    actor_cls = ray.remote(_toy_class()).options(num_cpus=0, max_restarts=0)
    group = ActorGroup([actor_cls.remote() for _ in range(n)], "toy group", "toy", ToyError,
                       **kw)
    assert group.call("act", [("return",)] * n) == [0.0] * n
    return group


def _is_dead(ray, actor, within_s: float = 30.0) -> bool:
    """True once calls to `actor` fail as a dead actor's: `ray.kill` is asynchronous, so on a
    loaded machine a call made just after it may still be answered."""
    import time

    deadline = time.monotonic() + within_s
    while time.monotonic() < deadline:
        try:
            ray.get(actor.act.remote("return"), timeout=within_s)
        except ray.exceptions.RayActorError:
            return True
        time.sleep(0.5)
    return False


def test_results_come_in_actor_order_and_none_skips_an_actor(ray_session):
    group = _group(ray_session, 3)
    try:
        assert group.call("act", [("sleep", 0.3), None, ("sleep", 0.1)]) == [0.3, 0.1]
        refs = group.submit("act", [("return",)] * 3)
        assert group.wait(refs, "again") == [0.0, 0.0, 0.0]
        with pytest.raises(ValueError, match="2 argument tuples for 3 toys"):
            group.call("act", [()] * 2)
    finally:
        group.close()
    with pytest.raises(ToyError, match="the toy group is closed"):
        group.call("act", [()] * 3)


def test_a_raising_actor_fails_the_call_and_every_actor_is_stopped(ray_session):
    group = _group(ray_session, 2)
    actors = group.live()
    with pytest.raises(ToyError) as failure:
        group.call("act", [("return",), ("raise",)], "acting")
    message = str(failure.value)
    assert message.startswith("acting failed on toy 1; the toy group was stopped.\n--- toy 1: ")
    assert "ValueError: toy failure after 0.0 s" in message  # the actor's own error
    assert "--- toy 0" not in message  # it finished: not blamed
    assert all(_is_dead(ray_session, a) for a in actors)
    with pytest.raises(ToyError, match="the toy group failed earlier and is closed: acting "
                                       "failed on toy 1"):
        group.call("act", [()] * 2)
    group.close()  # harmless after a failure


def test_a_dead_process_is_named_before_its_peers_errors(ray_session):
    """As collective peers, the others get a few seconds to report their own errors: the
    raise arrives after the death, yet the dead actor comes first."""
    group = _group(ray_session, 3, peers_timeout_s=30.0)
    start = time.monotonic()
    with pytest.raises(ToyError) as failure:
        group.call("act", [("raise", 0.5), ("sleep", 60.0), ("die",)])
    assert time.monotonic() - start < 20
    message = str(failure.value)
    assert "act failed on toy(s) [2, 0, 1]" in message
    assert message.index("--- toy 2: ActorDiedError") < message.index("--- toy 0: RayTaskError")
    assert message.index("--- toy 0") < message.index(
        "--- toy 1: still running when the group was stopped")

    group = _group(ray_session, 2, peers_timeout_s=30.0)
    with pytest.raises(ToyError, match=r"act failed on toy\(s\) \[1, 0\]") as failure:
        group.call("act", [("raise",), ("die",)])
    assert str(failure.value).splitlines()[1].startswith("--- toy 1: ActorDiedError")


def test_independent_actors_are_stopped_not_blamed_when_another_fails(ray_session):
    group = _group(ray_session, 2)
    start = time.monotonic()
    with pytest.raises(ToyError, match=r"act failed on toy 1; ") as failure:
        group.call("act", [("sleep", 60.0), ("die",)])
    assert time.monotonic() - start < 20
    assert "--- toy 1: ActorDiedError" in str(failure.value)
    assert "--- toy 0" not in str(failure.value)


def test_a_fixed_timeout_fails_the_actors_still_running(ray_session):
    group = _group(ray_session, 2)
    start = time.monotonic()
    with pytest.raises(ToyError) as failure:
        group.call("act", [("return",), ("sleep", 60.0)], "start", timeout_s=1.0)
    assert time.monotonic() - start < 20
    message = str(failure.value)
    assert "start failed on toy 1" in message
    assert "--- toy 1: did not finish within 1 s\n" in message
    assert "cluster resources:" in message


def test_collective_peers_get_one_timeout_more_once_one_has_finished(ray_session):
    group = _group(ray_session, 2, peers_timeout_s=1.0)
    # No deadline while all run: both take longer than the peers' timeout.
    assert group.call("act", [("sleep", 2.0), ("sleep", 2.0)]) == [2.0, 2.0]
    start = time.monotonic()
    with pytest.raises(ToyError, match="did not finish within 1 s of the first toy"):
        group.call("act", [("return",), ("sleep", 60.0)])
    assert time.monotonic() - start < 20


def test_abandon_stops_the_actors_and_raises_only_their_own_errors(ray_session):
    group = _group(ray_session, 2)
    actors = group.live()
    refs = group.submit("act", [("return",), ("sleep", 60.0)])
    group.abandon(refs, "sync", "sync failed on this side", grace_s=0.5)  # no actor error
    assert all(_is_dead(ray_session, a) for a in actors)
    # toy 1 is alive but had not done its part: the peer the joint call waited on is named
    with pytest.raises(ToyError, match="failed earlier and is closed: sync failed on this side; "
                                       "toy 1 had not finished its part of the sync$"):
        group.live()

    group = _group(ray_session, 2)
    refs = group.submit("act", [("sleep", 60.0), ("die",)])
    with pytest.raises(ToyError, match="sync failed on toy 1"):
        group.abandon(refs, "sync", "sync failed on this side", grace_s=3.0)
