"""The bounded scorer: errors and timeouts are counted, never raised; workers are replaced."""

import time

import pytest

from rlvr.rewards.scorer import RewardScorer, ScoreRequest


@pytest.fixture(scope="module")
def scorer():
    with RewardScorer(num_workers=2, timeout_s=1.0) as s:
        yield s


def _req(i, completion="7", truth="7", verifiers=("gsm8k",)):
    return ScoreRequest(sample_id=f"s{i}", completion=completion, ground_truth=truth,
                        verifiers=verifiers)


def test_scores_in_order(scorer):
    out = scorer.score([_req(i, completion=str(i), truth="3") for i in range(6)])
    assert [o.score for o in out] == [0, 0, 0, 1, 0, 0]


def test_error_timeout_and_crash_are_counted_and_the_next_batch_works(scorer):
    scorer.metrics_since_last()
    start = time.monotonic()
    out = scorer.score([_req(0, verifiers=("tests.rewards.hostile:raises",)),
                        _req(1, verifiers=("tests.rewards.hostile:hangs",)),
                        _req(2, verifiers=("tests.rewards.hostile:dies",)),
                        _req(3), _req(4, verifiers=("no_such_verifier",))])
    assert time.monotonic() - start < 5.0
    assert out[0].score == 0 and "verifier bug" in out[0].error
    assert out[1].score == 0 and out[1].timed_out
    assert out[2].score == 0 and "crashed" in out[2].error
    assert out[3].score == 1.0
    assert out[4].score == 0 and "unknown verifier" in out[4].error
    assert scorer.metrics_since_last() == {"reward/verifier_errors": 3.0,
                                           "reward/verifier_timeouts": 1.0}
    assert scorer.metrics_since_last() == {"reward/verifier_errors": 0.0,
                                           "reward/verifier_timeouts": 0.0}
    assert [o.score for o in scorer.score([_req(i) for i in range(4)])] == [1.0] * 4


def test_aggregators():
    with RewardScorer(num_workers=0, aggregator="sum") as s:
        out = s.score([_req(0, verifiers=("gsm8k", "last_number"))])
    assert out[0].score == 2.0 and out[0].per_verifier == {"gsm8k": 1.0, "last_number": 1.0}


def test_close_leaves_no_worker_processes():
    s = RewardScorer(num_workers=2, timeout_s=1.0)
    s.score([_req(0)])
    processes = [w.process for w in s._workers]
    s.close()
    assert processes and not any(p.is_alive() for p in processes)
