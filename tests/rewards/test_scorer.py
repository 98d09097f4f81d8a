"""The bounded scorer: right scores in order; errors, crashes and timeouts counted, never raised.

The misbehaving verifiers below are registered with the ordinary decorator when pytest imports
this module; worker processes see them because a scorer's workers import every module that had
registered a verifier when the scorer was built (here, `tests.rewards.test_scorer`).
`half_verifier` is not registered at all: it is named by its `module:function` path.
"""

import gc
import logging
import os
import subprocess
import sys
import time

import pytest

from rlvr.rewards import RewardScorer, ScoreRequest, get_verifier, register_verifier

TIMEOUT_S = 1.0
# The bound is "timeout plus slack", not exact. The verifiers cut here never return, so any bound
# far under pytest's timeout shows the cut; 2.5 s took 4.2 s beside 14 other xdist workers.
SLACK_S = 10.0


@register_verifier("test_raises")
def raising_verifier(completion: str, ground_truth: str) -> float:
    raise RuntimeError(f"verifier bug on {completion!r}")


@register_verifier("test_hangs")
def hanging_verifier(completion: str, ground_truth: str) -> float:
    while True:
        pass


@register_verifier("test_dies")
def dying_verifier(completion: str, ground_truth: str) -> float:
    os._exit(3)


@register_verifier("test_nan")
def nan_verifier(completion: str, ground_truth: str) -> float:
    return float("nan")


def half_verifier(completion: str, ground_truth: str) -> float:
    return 0.5


@pytest.fixture(scope="module")
def scorer():
    with RewardScorer(num_workers=2, timeout_s=TIMEOUT_S) as s:
        yield s


def _req(i, completion="7", truth="7", verifiers=("gsm8k",)):
    return ScoreRequest(sample_id=f"s{i}", completion=completion, ground_truth=truth,
                        verifiers=verifiers)


def _gone(pid: int) -> bool:
    """True once `pid` has exited (a zombie counts: it no longer runs)."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] in ("Z", "X")
    except FileNotFoundError:
        return True


def test_scores_in_request_order(scorer):
    requests = [_req(i, completion=f"so {i}", truth="#### 3") for i in range(6)]
    requests += [_req(6, "\\boxed{\\frac12}", "0.5", ("math",)),
                 _req(7, "\\boxed{3}", "4", ("math",))]
    out = scorer.score(requests)
    assert [o.score for o in out] == [0, 0, 0, 1, 0, 0, 1, 0]
    assert out[3].per_verifier == {"gsm8k": 1.0} and out[6].per_verifier == {"math": 1.0}
    assert not any(o.error or o.timed_out for o in out)
    assert scorer.score([]) == []


@pytest.mark.parametrize("aggregator, expected", [("last", 0.0), ("sum", 1.0)])
def test_aggregators_combine_in_the_order_named(aggregator, expected):
    # gsm8k reads the last number (7): right; math reads the box (3): wrong.
    with RewardScorer(num_workers=0, aggregator=aggregator) as s:
        out = s.score([_req(0, "\\boxed{3} or 7", "7", ("gsm8k", "math"))])
    assert out[0].score == expected and out[0].per_verifier == {"gsm8k": 1.0, "math": 0.0}


def test_bad_settings_raise():
    with pytest.raises(ValueError, match="unknown reward aggregator 'max'"):
        RewardScorer(num_workers=0, aggregator="max")
    with pytest.raises(ValueError, match="timeout_s > 0"):
        RewardScorer(num_workers=0, timeout_s=0)


@pytest.mark.parametrize("verifiers, error_text", [
    (("gsm8k", "test_raises"), "test_raises: RuntimeError: verifier bug on '7'"),
    (("no_such_verifier",), "unknown verifier 'no_such_verifier'; known: "),
    (("test_nan",), "ValueError: verifier returned nan"),
    (("tests.rewards.test_scorer:no_such_function",), "has no function"),
    ((), "no verifier named"),
])
def test_a_failing_verifier_is_a_counted_error_scoring_zero(scorer, caplog, verifiers, error_text):
    scorer.metrics_since_last()
    with caplog.at_level(logging.WARNING, logger="rlvr.rewards.scorer"):
        out = scorer.score([_req(0, verifiers=verifiers), _req(1)])
    assert out[0].score == 0.0 and error_text in out[0].error and not out[0].timed_out
    assert out[1].score == 1.0 and out[1].error is None
    counts = scorer.metrics_since_last()
    assert counts["reward/verifier_errors"] == 1 and counts["reward/verifier_timeouts"] == 0
    assert counts["time/scoring"] > 0.0
    assert "sample s0" in caplog.text and error_text in caplog.text


def test_a_verifier_failing_every_sample_prints_one_error_and_a_summary(caplog):
    """A broken verifier fails every sample: the console got a warning per sample; now the
    first error whole, then one line for the step."""
    with RewardScorer(num_workers=0) as s:
        with caplog.at_level(logging.WARNING, logger="rlvr.rewards.scorer"):
            s.score([_req(i, verifiers=("test_raises",)) for i in range(5)])
            assert s.metrics_since_last()["reward/verifier_errors"] == 5
    lines = [r.getMessage() for r in caplog.records]
    assert len(lines) == 2, lines
    assert lines[0].startswith("verifier error on sample s0: test_raises: RuntimeError")
    assert lines[1].startswith("5 verifier errors and 0 timeouts in this step")


def test_other_verifiers_of_a_failing_request_keep_their_scores(scorer):
    out = scorer.score([_req(0, verifiers=("gsm8k", "test_raises", "last_number"))])
    assert out[0].per_verifier == {"gsm8k": 1.0, "test_raises": 0.0, "last_number": 1.0}
    assert out[0].score == 1.0 and "RuntimeError" in out[0].error  # "last" aggregator


def test_a_verifier_named_by_module_path(scorer):
    out = scorer.score([_req(0, verifiers=("tests.rewards.test_scorer:half_verifier",))])
    assert out[0].score == 0.5 and out[0].error is None


def test_a_hung_verifier_times_out_its_worker_is_replaced_and_the_next_batch_works(scorer):
    scorer.metrics_since_last()
    hung_pids = {w.process.pid for w in scorer._workers}
    start = time.monotonic()
    out = scorer.score([_req(0, verifiers=("test_hangs",))] + [_req(i) for i in range(1, 12)])
    assert time.monotonic() - start < TIMEOUT_S + SLACK_S
    assert out[0].score == 0.0 and out[0].timed_out and out[0].per_verifier == {}
    # Requests queued behind the hung one were sent again elsewhere, not charged.
    assert all(o.score == 1.0 and not o.timed_out for o in out[1:])
    counts = scorer.metrics_since_last()
    assert counts["reward/verifier_errors"] == 0 and counts["reward/verifier_timeouts"] == 1
    assert sum(_gone(pid) for pid in hung_pids) == 1  # exactly the hung worker was killed
    assert len(scorer._workers) == 2
    assert [o.score for o in scorer.score([_req(i) for i in range(8)])] == [1.0] * 8


def test_a_worker_that_dies_mid_request_is_an_error_and_is_replaced(scorer):
    scorer.metrics_since_last()
    out = scorer.score([_req(0, verifiers=("test_dies",))] + [_req(i) for i in range(1, 8)])
    assert out[0].score == 0.0 and "died (exit code 3)" in out[0].error
    assert all(o.score == 1.0 for o in out[1:])
    assert scorer.metrics_since_last()["reward/verifier_errors"] == 1


def test_pathological_inputs_are_bounded_by_the_timeout(scorer):
    huge = "1" * 100_000
    start = time.monotonic()
    out = scorer.score([
        _req(0, "\\boxed{10^{10^{10^{10}}}}", "5", ("math",)),  # math-verify never returns
        _req(1, huge + " 5", "5", ("gsm8k",)),
        _req(2, "word " * 20_000 + "\\boxed{5}", "5", ("math",)),
        _req(3, "{" * 5_000 + "5" + "}" * 5_000, "5", ("math",)),
    ])
    assert time.monotonic() - start < TIMEOUT_S + SLACK_S
    assert out[0].timed_out and out[0].score == 0.0
    assert [o.score for o in out[1:3]] == [1.0, 1.0]
    assert out[3].score == 0.0 or out[3].timed_out  # whichever: it must not stall the batch


def test_batch_throughput_after_warm_up(scorer):
    requests = [_req(i, f"Step 1: 3*4=12. The answer is {i % 10}.", "#### 7") for i in range(256)]
    scorer.score(requests[:8])  # both workers up (one may have been replaced above)
    start = time.monotonic()
    out = scorer.score(requests)
    elapsed = time.monotonic() - start
    assert sum(o.score for o in out) == 25  # i % 10 == 7 for 25 of 0..255
    # ~0.05 s when idle. Generous (a loaded machine, xdist workers): it catches a process
    # started per request (0.1-0.3 s each), not a slower pool; benchmarks measure speed.
    assert elapsed < 10.0, f"256 easy requests took {elapsed:.2f} s"


def _worker_pids(s: RewardScorer) -> list[int]:
    return [w.process.pid for w in s._workers]


def test_close_leaves_no_worker_processes():
    s = RewardScorer(num_workers=1, timeout_s=TIMEOUT_S)
    pids = _worker_pids(s)
    assert s.score([_req(0)])[0].score == 1.0
    s.close()
    s.close()  # idempotent
    assert pids and all(_gone(pid) for pid in pids)
    with pytest.raises(RuntimeError, match="closed"):
        s.score([_req(0)])


def test_garbage_collection_and_an_exception_in_the_parent_kill_the_workers():
    s = RewardScorer(num_workers=1)
    pids = _worker_pids(s)
    del s
    gc.collect()
    assert all(_gone(pid) for pid in pids)
    with pytest.raises(KeyError):
        with RewardScorer(num_workers=1) as s:
            pids = _worker_pids(s)
            raise KeyError("the trainer failed")
    assert all(_gone(pid) for pid in pids)


def test_workers_exit_when_the_parent_is_killed_mid_request():
    script = (
        "import os, threading, time\n"
        "from rlvr.rewards import RewardScorer, ScoreRequest\n"
        "s = RewardScorer(num_workers=1, timeout_s=60)\n"
        "print(s._workers[0].process.pid, flush=True)\n"
        "s.score([ScoreRequest('w', '7', '7', ('gsm8k',))])  # the worker is up\n"
        "request = ScoreRequest('x', '7', '7', ('tests.rewards.test_scorer:hanging_verifier',))\n"
        "threading.Thread(target=s.score, args=([request],), daemon=True).start()\n"
        "time.sleep(0.5)  # the worker is importing the module or spinning in the loop\n"
        "os.kill(os.getpid(), 9)\n"
    )
    repo_root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    parent = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                            timeout=30, cwd=repo_root)
    pid = int(parent.stdout.split()[0])
    deadline = time.monotonic() + 3.0
    while not _gone(pid) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert _gone(pid)


def test_registry_rejects_a_second_function_under_a_taken_name():
    with pytest.raises(ValueError, match="already registered"):
        register_verifier("gsm8k")(half_verifier)
    with pytest.raises(KeyError, match="known: .*gsm8k"):
        get_verifier("nope")
    assert get_verifier("tests.rewards.test_scorer:half_verifier") is half_verifier
