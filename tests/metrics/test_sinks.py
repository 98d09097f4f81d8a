"""Metric sinks, timing and MFU arithmetic."""

import io
import json
import math
import time

import pytest

from rlvr.metrics import ConsoleSink, JsonlSink, StepTimer, TensorBoardSink


def test_jsonl_lines_and_non_finite_values(tmp_path):
    path = tmp_path / "m.jsonl"
    sink = JsonlSink(path)
    sink.log(1, {"a": 1.5, "b": math.nan})
    sink.log(2, {"a": math.inf})
    sink.close()
    rows = [json.loads(line) for line in path.read_text().splitlines()]
    assert rows == [{"training_step": 1, "a": 1.5, "b": None}, {"training_step": 2, "a": None}]


def test_torn_last_line_dropped_and_truncate_after(tmp_path):
    path = tmp_path / "m.jsonl"
    path.write_text('{"training_step": 1}\n{"training_step": 2}\n{"training_st')
    sink = JsonlSink(path)
    sink.log(3, {})
    sink.close()
    assert [json.loads(l)["training_step"] for l in path.read_text().splitlines()] == [1, 2, 3]
    JsonlSink.truncate_after(path, 1)
    assert path.read_text() == '{"training_step": 1}\n'


def test_tensorboard_writes_events(tmp_path):
    sink = TensorBoardSink(tmp_path / "tb")
    sink.log(1, {"x": 1.0, "y": math.nan})
    sink.close()
    assert list((tmp_path / "tb").glob("events.out.tfevents.*"))


def test_wandb_offline(tmp_path):
    pytest.importorskip("wandb", reason="the tracking extra is not installed")
    from rlvr.metrics import WandbSink

    sink = WandbSink(project="t", name="t", mode="offline", config={"a": 1}, dir=tmp_path)
    sink.log(1, {"x": 1.0})
    sink.close()
    assert list((tmp_path / "wandb").glob("offline-run-*"))


def test_console_prints_a_line_per_step_without_a_tty():
    out = io.StringIO()
    clock = lambda: time.struct_time((2026, 11, 28, 20, 18, 36, 5, 332, 0))  # noqa: E731
    sink = ConsoleSink(3, ["objective/verifiable_reward", "missing"], stream=out, clock=clock)
    sink.log(1, {"objective/verifiable_reward": 0.25})
    sink.close()
    # Timestamped, and each figure under its metric's name: `eval/scores` and `objective/scores`
    # are different metrics, which a shortened `scores=` could not tell apart.
    assert out.getvalue() == "20:18:36 step 1/3 objective/verifiable_reward=0.25\n"


def test_step_timer_accumulates():
    timer = StepTimer()
    for _ in range(2):
        with timer("a"):
            pass
    assert set(timer.as_metrics()) == {"time/a"} and timer.as_metrics()["time/a"] >= 0
