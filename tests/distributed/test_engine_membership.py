"""`EngineMembership`'s bookkeeping without Ray: a lost engine counted once, by its handle, with
one warning naming its node; how many engines fit in what Ray has free. (Its Ray calls, the
shares redone and an engine taken back, run in test_engine_group.py and test_lost_node.py.)"""

from __future__ import annotations

import logging

import pytest

from rlvr.distributed.engine_membership import EngineActor, EngineMembership, _room


def _members(n: int) -> EngineMembership:
    engines = [EngineActor(object(), f"node{i}" + "0" * 20, f"10.0.0.{i}") for i in range(n)]
    return EngineMembership(engines, n, start=lambda k: [], locate=lambda h, t: [],
                            resources_per_engine={"CPU": 1.0, "GPU": 0.0}, timeout_s=1.0)


def test_a_lost_engine_is_dropped_by_its_handle_and_counted_once(caplog):
    members = _members(3)
    first, second = members.handles[:2]
    caplog.set_level(logging.WARNING)
    members.lose([second], "generation", "ActorUnavailableError: gone\nmore")
    assert members.handles[0] is first and len(members.handles) == 2
    assert members.take_change() == members.handles and members.take_change() is None
    members.lose([second], "a weight sync", "ActorDiedError: gone")  # found again elsewhere
    assert members.metrics() == {"engines/live": 2.0, "engines/lost_total": 1.0,
                                 "engines/joined_total": 0.0}
    assert [r.getMessage() for r in caplog.records] == [
        "engine actor 1 on node node10000000 (10.0.0.1) was lost during generation "
        "(ActorUnavailableError: gone); 2 engine(s) of 3 left, its work is redone on them"]


def test_the_last_engine_lost_says_none_is_left(caplog):
    members = _members(1)
    caplog.set_level(logging.WARNING)
    members.lose(members.handles, "generation", "ActorDiedError: gone")
    assert members.engines == [] and "no engine is left" in caplog.text


@pytest.mark.parametrize("free, per_engine, fits", [
    ({"CPU": 2.5}, {"CPU": 1.0, "GPU": 0.0}, 2),
    ({"CPU": 4.0, "GPU": 1.0}, {"CPU": 1.0, "GPU": 1.0}, 1),
    ({"CPU": 4.0}, {"CPU": 1.0, "GPU": 1.0}, 0),  # no GPU free
    ({}, {"CPU": 1.0}, 0),
])
def test_engines_start_only_where_ray_has_room(free, per_engine, fits):
    assert _room(free, per_engine) == fits


def test_an_engine_that_fails_to_start_is_not_tried_again_at_every_sync(monkeypatch):
    """Room Ray counts but cannot give may cost the group's timeout per try: after a failed
    start, none for a while. A start that works joins, to receive the weights first."""
    ray = pytest.importorskip("ray", exc_type=ImportError)
    monkeypatch.setattr(ray, "available_resources", lambda: {"CPU": 4.0})
    monkeypatch.setattr(ray, "kill", lambda handle, no_restart: None)
    starts, places = [], [RuntimeError("did not start")]
    members = _members(2)
    members.lose(members.handles[1:], "generation", "ActorDiedError: gone")
    members._start = lambda n: starts.append(n) or [object() for _ in range(n)]
    members._locate = lambda handles, timeout_s: [places.pop(0)]
    assert members.refill() == 0 and members.refill() == 0 and starts == [1]
    members._retry_after = 0.0  # the wait is over
    places.append(("node2" + "0" * 20, "10.0.0.2"))
    assert members.refill() == 1 and starts == [1, 1]
    assert not members.engines[-1].has_weights
    assert members.metrics()["engines/joined_total"] == 1.0
