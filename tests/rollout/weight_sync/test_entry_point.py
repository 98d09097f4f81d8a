"""`rlvr.rollout.weight_sync.sync_weights`, the one entry point: which path it takes for which
learner and engine (the paths themselves are tested in test_broadcast.py and
tests/distributed)."""

from __future__ import annotations

import torch

from rlvr.rollout.weight_sync import sync_weights


class _Learner:
    def named_weights(self):
        return iter([("w", torch.ones(2))])


class _RankZeroLearner(_Learner):
    def __init__(self):
        self.broadcasts = []

    def broadcast_to(self, engines, version):
        self.broadcasts.append((engines, version))


class _Engine:
    def __init__(self):
        self.loaded = []

    def update_weights(self, named_tensors, version):
        self.loaded.append(({n: t.tolist() for n, t in named_tensors}, version))


class _ActorEngines(_Engine):
    """Engines in other processes that take a broadcast from any sender."""

    def receive_while(self, send):
        send()

    def endpoint(self):
        return ("127.0.0.1", 1)


def test_an_engine_in_process_takes_the_weights_as_a_copy():
    engine = _Engine()
    sync_weights(_Learner(), engine, 3)
    assert engine.loaded == [({"w": [1.0, 1.0]}, 3)]


def test_engine_actors_receive_from_rank_0_when_the_learner_can_send_from_there():
    learner, engines = _RankZeroLearner(), _ActorEngines()
    sync_weights(learner, engines, 4)
    assert learner.broadcasts == [(engines, 4)] and engines.loaded == []


def test_engine_actors_take_a_learner_in_this_process_through_their_own_update():
    engines = _ActorEngines()
    sync_weights(_Learner(), engines, 5)  # the group broadcasts from this process
    assert engines.loaded == [({"w": [1.0, 1.0]}, 5)]


def test_a_rank_zero_learner_with_an_engine_in_process_copies():
    learner, engine = _RankZeroLearner(), _Engine()
    sync_weights(learner, engine, 6)
    assert learner.broadcasts == [] and engine.loaded == [({"w": [1.0, 1.0]}, 6)]
