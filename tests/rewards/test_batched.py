"""Batched verifiers beside the workers: routed by name, merged in the order a request names its
verifiers, their errors and timeouts counted with every other verifier's."""

import pytest

from rlvr.rewards import RewardScorer, ScoreRequest
from rlvr.rewards.batched import BatchScore, combine, route, run_batched
from rlvr.rewards.registry import BATCHED_VERIFIERS, get_verifier, is_known_verifier

STUB = "test_batched_stub"
if STUB not in BATCHED_VERIFIERS:
    BATCHED_VERIFIERS.add(STUB, "the test's stub", defined_by=route)


class StubStage:
    """Scores "good" 1.0 and "so-so" 0.5, reports "bad" as an error and "slow" as a timeout;
    records every batch it was given."""

    def __init__(self):
        self.batches, self.closed = [], False

    def score_batch(self, requests):
        self.batches.append([r.sample_id for r in requests])
        table = {"good": BatchScore(1.0), "so-so": BatchScore(0.5),
                 "bad": BatchScore(error="unparseable"), "slow": BatchScore(timed_out=True)}
        return [table[r.completion] for r in requests]

    def close(self):
        self.closed = True


def _req(i, completion, verifiers):
    return ScoreRequest(f"s{i}", completion, "7", verifiers)


def test_routing_splits_each_request_between_workers_and_stages():
    requests = [_req(0, "7", ("gsm8k", STUB)), _req(1, "7", (STUB,)), _req(2, "7", ("gsm8k",)),
                _req(3, "7", ())]
    routing = route(requests)
    assert routing.worker_index == [0, 2, 3]  # a request naming nothing: the workers report it
    assert [r.verifiers for r in routing.worker_requests] == [("gsm8k",), ("gsm8k",), ()]
    assert routing.worker_requests[1] is requests[2]
    assert routing.batched == {STUB: [0, 1]}


def test_combine_keeps_the_named_order_and_any_timeout_wins():
    ok = BatchScore(0.5)
    assert combine(("a", STUB, "b"), ([1.0, 0.0], None, False), {STUB: ok}) == \
        ([1.0, 0.5, 0.0], None, False)
    assert combine((STUB,), None, {STUB: BatchScore(error="bad")}) == ([0.0], f"{STUB}: bad",
                                                                       False)
    assert combine(("a", STUB), ([1.0], "a: boom", False), {STUB: BatchScore(timed_out=True)}) \
        == ([], "a: boom", True)


def test_an_unconfigured_or_broken_stage_is_every_request_s_error():
    requests = [_req(0, "good", (STUB,))]
    routing = route(requests)
    assert "not configured" in run_batched(requests, routing, {})[STUB][0].error

    class Broken:
        def score_batch(self, requests):
            raise RuntimeError("stage bug")

    assert run_batched(requests, routing, {STUB: Broken()})[STUB][0].error == \
        "RuntimeError: stage bug"


@pytest.mark.parametrize("num_workers", [0, 1])
def test_the_scorer_merges_stage_and_worker_scores_and_counts_failures(num_workers):
    stage = StubStage()
    requests = [_req(0, "good", (STUB,)), _req(1, "7", ("gsm8k",)),
                _req(2, "so-so", ("last_number", STUB)), _req(3, "bad", (STUB,)),
                _req(4, "slow", (STUB,))]
    with RewardScorer(num_workers=num_workers, timeout_s=10.0, aggregator="sum",
                      batched={STUB: stage}) as scorer:
        out = scorer.score(requests)
        counts = scorer.metrics_since_last()
    assert stage.closed and stage.batches == [["s0", "s2", "s3", "s4"]]  # one batch per call
    assert [o.score for o in out] == [1.0, 1.0, 0.5, 0.0, 0.0]
    assert out[2].per_verifier == {"last_number": 0.0, STUB: 0.5}
    assert out[3].error == f"{STUB}: unparseable" and not out[3].timed_out
    assert out[4].timed_out
    assert counts["reward/verifier_errors"] == 1 and counts["reward/verifier_timeouts"] == 1


def test_a_batched_name_is_known_to_data_but_no_worker_function():
    assert is_known_verifier("llm_judge")
    with pytest.raises(KeyError, match="needs rewards.judge"):
        get_verifier("llm_judge")
    with RewardScorer(num_workers=0) as scorer:  # rows naming it, but no judge configured
        (outcome,) = scorer.score([_req(0, "7", ("llm_judge",))])
    assert "not configured: 'llm_judge' needs rewards.judge" in outcome.error
