"""Generation ahead of training: the bounded producer, version stamps, stale-group drops, and the
tiny config trained with async_steps=2."""

import threading
import time

import pytest

from rlvr.producer.ahead import RolloutProducer
from rlvr.config import load_config
from rlvr.run.loop import train


def test_producer_runs_ahead_by_at_most_async_steps_and_accounts_waiting():
    made = []

    def produce():
        made.append(len(made))
        return made[-1]

    with RolloutProducer(produce, async_steps=2) as producer:
        time.sleep(0.5)  # the trainer is busy: the producer makes two batches, then blocks
        assert len(made) == 2  # never more than async_steps ahead, finished or in progress
        first, waited = producer.next_batch(timeout_s=5)
        assert first.item == 0 and waited < 0.2  # data was ready: the trainer did not wait
        assert producer.blocked_since_last() > 0.3  # the producer waited for the trainer
        assert [producer.next_batch(timeout_s=5)[0].item for _ in range(3)] == [1, 2, 3]
        time.sleep(0.3)
        assert len(made) == 6  # taking three freed three slots


def test_producer_error_reraises_in_the_trainer_and_thread_ends():
    def produce():
        raise ValueError("engine died")

    producer = RolloutProducer(produce, async_steps=1)
    with pytest.raises(RuntimeError, match="rollout generation failed") as info:
        producer.next_batch(timeout_s=5)
    assert isinstance(info.value.__cause__, ValueError)
    producer.close()
    assert not any(t.name == "rollout-producer" and t.is_alive() for t in threading.enumerate())


def test_tiny_trains_with_async_steps_2_within_the_staleness_bound(tmp_path):
    cfg = load_config("configs/tiny.yaml", [
        f"experiment.output_dir={tmp_path}", "experiment.total_episodes=80",
        "rollout.async_steps=2", "algorithm.filter_zero_std_samples=false",
        "eval.local_eval_every=0", "logging.progress_bar=false", "checkpoint.save_final=false",
        "checkpoint.save_freq=0"])
    run = train(cfg)
    steps = [r for r in run.history if r["training_step"] > 0]
    assert [r["training_step"] for r in steps] == [1, 2, 3, 4, 5]
    for r in steps:
        step = r["training_step"]
        # What trained step `step` came from weights at most 2 versions behind step - 1.
        assert step - 1 - 2 <= r["async/model_step_min"] <= r["async/model_step_max"] <= step - 1
        assert 0 <= r["async/num_steps_off_policy"] <= 2
        assert r["async/stale_results_dropped"] >= 0
        assert r["time/trainer_waiting_for_data"] >= 0
        assert "time/generation_waiting_for_trainer" in r
    assert steps[0]["async/model_step_max"] == 0  # the first batch comes from the initial weights
    assert not any(t.name == "rollout-producer" and t.is_alive() for t in threading.enumerate())


def _child_pids() -> set[int]:
    import os
    from pathlib import Path

    me = str(os.getpid())
    pids = set()
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        if fields[1] == me and fields[0] != "Z":  # field 4 of stat: the parent pid
            pids.add(int(stat.parent.name))
    return pids


def test_an_engine_failure_in_async_mode_stops_the_run_and_leaves_no_processes(tmp_path,
                                                                            monkeypatch):
    from rlvr.rollout.transformers.engine import TransformersEngine

    calls = {"n": 0}
    real_generate = TransformersEngine.generate

    def failing_generate(self, prompts, params):
        calls["n"] += 1
        if calls["n"] == 3:
            raise RuntimeError("engine crashed")
        return real_generate(self, prompts, params)

    monkeypatch.setattr(TransformersEngine, "generate", failing_generate)
    before = _child_pids()
    cfg = load_config("configs/tiny.yaml", [
        f"experiment.output_dir={tmp_path}", "experiment.total_episodes=96",
        "rollout.async_steps=2", "eval.local_eval_every=0", "logging.progress_bar=false",
        "checkpoint.save_freq=0"])
    with pytest.raises(RuntimeError, match="rollout generation failed") as info:
        train(cfg)
    assert "engine crashed" in str(info.value.__cause__)
    time.sleep(0.5)  # reaped scorer workers vanish from /proc
    assert _child_pids() <= before  # no reward worker outlives the run
    assert not any(t.name == "rollout-producer" and t.is_alive() for t in threading.enumerate())
