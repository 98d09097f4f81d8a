"""A step's distributions in the sinks: `distributions.jsonl` (written whole, truncated on
resume like `metrics.jsonl`), TensorBoard and W&B histograms; and a tiny run end to end."""

import json

import pytest

from rlvr.cli import main
from rlvr.metrics.distributions import (ADVANTAGE, LEARNER_ENGINE_RATIO, RESPONSE_LENGTH,
                                        REWARD, DistributionSummary, summarize)
from rlvr.metrics.sinks import DistributionsJsonlSink, JsonlSink, MetricsLogger, TensorBoardSink

SUMMARIES = {"reward": summarize([0.0, 1.0, 1.0, 1.0]), "response_length": summarize([4, 8])}


def _steps(path):
    return [json.loads(line)["training_step"] for line in path.read_text().splitlines()]


def test_jsonl_has_a_line_per_step_of_each_summary_and_reads_back(tmp_path):
    path = tmp_path / "distributions.jsonl"
    sink = DistributionsJsonlSink(path)
    sink.log(1, {"objective/scores": 0.5})  # scalars are metrics.jsonl's
    sink.log_distributions(1, SUMMARIES)
    sink.log_distributions(2, {})  # nothing to record: no line
    sink.log_distributions(3, {"reward": SUMMARIES["reward"]})
    sink.close()
    lines = [json.loads(line) for line in path.read_text().splitlines()]
    assert [line["training_step"] for line in lines] == [1, 3]
    assert set(lines[0]) == {"training_step", "reward", "response_length"}
    assert DistributionSummary.from_json(lines[0]["reward"]) == SUMMARIES["reward"]


def test_jsonl_drops_a_torn_line_on_open_and_truncates_as_metrics_do(tmp_path):
    path = tmp_path / "distributions.jsonl"
    sink = DistributionsJsonlSink(path)
    for step in (1, 2, 3):
        sink.log_distributions(step, SUMMARIES)
    sink.close()
    with path.open("a") as f:
        f.write('{"training_step": 4, "reward": {"cou')  # a crash mid-write
    sink = DistributionsJsonlSink(path)
    sink.close()
    assert _steps(path) == [1, 2, 3]
    JsonlSink.truncate_after(path, 2)  # what a resume from the state of step 2 does
    assert _steps(path) == [1, 2]


def test_the_logger_hands_distributions_to_the_sinks_that_take_them(tmp_path):
    got = []

    class ScalarsOnly:
        def log(self, step, metrics):
            got.append(("scalars", step))

        def close(self):
            pass

    class Both(ScalarsOnly):
        def log_distributions(self, step, summaries):
            got.append(("distributions", step, sorted(summaries)))

    logger = MetricsLogger([ScalarsOnly(), Both()])
    logger.log_distributions(5, SUMMARIES)
    assert got == [("distributions", 5, ["response_length", "reward"])]


def test_tensorboard_gets_each_histogram_as_summarised(tmp_path):
    pytest.importorskip("tensorboard")
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    sink = TensorBoardSink(tmp_path / "tb")
    sink.log_distributions(2, SUMMARIES)
    sink.close()
    events = EventAccumulator(str(tmp_path / "tb"), size_guidance={"histograms": 0})
    events.Reload()
    assert sorted(events.Tags()["histograms"]) == ["distributions/response_length",
                                                   "distributions/reward"]
    (event,) = events.Histograms("distributions/reward")
    h = event.histogram_value
    assert event.step == 2 and (h.min, h.max, h.num, h.sum) == (0.0, 1.0, 4, 3.0)
    assert h.sum_squares == pytest.approx(3.0)  # 0 + 1 + 1 + 1
    assert sum(h.bucket) == 4 and list(h.bucket_limit) == SUMMARIES["reward"].bin_edges[1:]


def test_wandb_offline_takes_the_histograms(tmp_path):
    pytest.importorskip("wandb", reason="the tracking extra is not installed")
    from rlvr.metrics import WandbSink

    sink = WandbSink(project="t", name="t", mode="offline", config={}, dir=tmp_path)
    sink.log_distributions(1, SUMMARIES)
    sink.log(1, {"x": 1.0})
    sink.close()
    assert list((tmp_path / "wandb").glob("offline-run-*"))


TINY = ["model.name_or_path=tiny-llama", "rollout.engine=transformers",
        "rollout.num_unique_prompts_rollout=4", "rollout.num_samples_per_prompt_rollout=4",
        "rollout.response_length=8", "data.max_prompt_length=128", "algorithm.pack_length=256",
        "data.eval_holdout=4", "eval.eval_at_start=false", "eval.local_eval_every=0",
        # every step updates, so every step has advantages and ratios
        "algorithm.filter_zero_std_samples=false", "logging.progress_bar=false",
        "rewards.num_workers=0", "checkpoint.checkpoint_state_freq=2",
        "checkpoint.save_final=false"]


@pytest.mark.timeout(300)
def test_a_run_writes_every_distribution_and_a_resume_redoes_the_later_steps(tmp_path):
    out = tmp_path / "run"
    args = ["train", *TINY, f"experiment.output_dir={out}"]
    assert main([*args, "experiment.total_episodes=48"]) == 0  # 3 steps, a state at step 2
    path = out / "distributions.jsonl"
    lines = [json.loads(line) for line in path.read_text().splitlines()]
    assert [line["training_step"] for line in lines] == [1, 2, 3]
    for line in lines:
        assert set(line) == {"training_step", REWARD, RESPONSE_LENGTH, ADVANTAGE,
                             LEARNER_ENGINE_RATIO}
        assert line[REWARD]["count"] == 16 and line[ADVANTAGE]["count"] == 16
        # one ratio per response token of the update: every sample's, all trained
        tokens = line[RESPONSE_LENGTH]["mean"] * line[RESPONSE_LENGTH]["count"]
        assert line[LEARNER_ENGINE_RATIO]["count"] == round(tokens)
        assert 0.9 < line[LEARNER_ENGINE_RATIO]["quantiles"]["p50"] < 1.1  # same weights
    # Further: resumed from the state of step 2, step 3 is trained again, and its first
    # line must not stay beside the new one.
    assert main([*args, "experiment.total_episodes=64"]) == 0
    assert _steps(path) == [1, 2, 3, 4]
    assert _steps(out / "metrics.jsonl") == [0, 1, 2, 3, 4]
