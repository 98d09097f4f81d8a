"""A run that stops on purpose loses nothing and never exits 0 having learnt nothing
(`rlvr.run.stopping`, docs/faults.md):
- the engine lost in the middle of a step: the state saved is the step before's, from before
  that step drew its prompts, so the rerun trains what the uninterrupted run trained;
- a weight sync failing after an update: the step keeps its record and model checkpoint;
- a verifier failing every sample under active sampling (which keeps no group then): exit 5;
- no learning signal (every group's rewards equal) for `algorithm.max_steps_without_update`
  steps in a row: exit 6, the state saved, the message saying why."""

from __future__ import annotations

import json

import pytest
import torch
from safetensors.torch import load_file

from rlvr.checkpoint.state import load_latest_state
from rlvr.cli import main
from rlvr.run.errors import EngineUnavailable
from rlvr.rollout.transformers import engine as transformers_engine
from tests.test_run_faults import _verifier_rows

TINY = ["configs/tiny.yaml", "experiment.total_episodes=96", "rollout.response_length=8",
        "checkpoint.checkpoint_state_freq=1", "algorithm.filter_zero_std_samples=false",
        "eval.eval_at_start=false", "eval.local_eval_every=0", "logging.progress_bar=false",
        "rewards.num_workers=0"]
TIMING = ("time/", "learner_tokens_per_second_step", "learner_mfu", "memory/")


def _fail_nth_call(monkeypatch, method: str, n: int) -> None:
    """The n-th call of the engine's `method` raises as a lost server would. (In a
    `monkeypatch.context()`: `monkeypatch.undo()` would also undo conftest's pinning of the
    CPU's bf16 detection, and the rerun would compute in bf16.)"""
    real, calls = getattr(transformers_engine.TransformersEngine, method), [0]

    def failing(self, *args, **kwargs):
        calls[0] += 1
        if calls[0] == n:
            raise EngineUnavailable(f"no inference server is left (in {method})")
        return real(self, *args, **kwargs)

    monkeypatch.setattr(transformers_engine.TransformersEngine, method, failing)


def _metrics(out) -> list[dict]:
    rows = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
    return [{k: v for k, v in r.items() if not k.startswith(TIMING) and k != "weight_sync/failed"}
            for r in rows]


def _same_final_weights(a, b) -> bool:
    wa, wb = (load_file(d / "final" / "model.safetensors") for d in (a, b))
    return wa.keys() == wb.keys() and all(torch.equal(wa[k], wb[k]) for k in wa)


@pytest.mark.parametrize("extra", [[], ["rollout.async_steps=1"]], ids=["sync", "async"])
def test_an_engine_lost_mid_step_resumes_with_that_steps_prompts(tmp_path, monkeypatch,
                                                                  extra):
    """The state of step 2 held the mixer after step 3's draw (and, async, the failed batch's
    prompts were not made again): the rerun trained step 4's prompts as step 3's."""
    straight, faulted = tmp_path / "straight", tmp_path / "faulted"
    steps = [*TINY, *extra, "experiment.total_episodes=64"]  # 4 steps
    assert main(["train", *steps, f"experiment.output_dir={straight}"]) == 0
    with monkeypatch.context() as patched:
        _fail_nth_call(patched, "generate", 3)  # the third step's generation
        assert main(["train", *steps, f"experiment.output_dir={faulted}"]) == 4
    assert load_latest_state(faulted / "state").step == 2
    assert main(["train", *steps, f"experiment.output_dir={faulted}"]) == 0
    expected, resumed = _metrics(straight), _metrics(faulted)
    if not extra:
        assert resumed == expected and _same_final_weights(straight, faulted)
        return
    # Asynchronous: the failed batch is made again from the same prompts, with the weights of
    # step 2 (the uninterrupted run had made it ahead with step 1's): only its versions differ.
    def same_prompts(row):
        return {k: v for k, v in row.items() if not k.startswith("async/")}
    assert [same_prompts(r) for r in resumed[:4]] == [same_prompts(r) for r in expected[:4]]
    assert (resumed[3]["async/model_step_min"], expected[3]["async/model_step_min"]) == (2, 1)


def test_a_failed_weight_sync_keeps_the_steps_record_and_checkpoint(tmp_path, monkeypatch):
    out = tmp_path / "run"
    args = ["train", *TINY, "checkpoint.save_freq=1", "checkpoint.keep_last_n_checkpoints=-1",
            f"experiment.output_dir={out}"]
    with monkeypatch.context() as patched:
        _fail_nth_call(patched, "update_weights", 3)  # the sync after step 3's update
        assert main(args) == 4
    logged = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
    assert [r["training_step"] for r in logged] == [0, 1, 2, 3]
    assert logged[-1]["weight_sync/failed"] == 1.0
    assert (out / "checkpoints" / "step_000003").is_dir()
    assert load_latest_state(out / "state").step == 3
    assert main(args) == 0
    steps = [json.loads(line)["training_step"] for line in (out / "metrics.jsonl").open()]
    assert steps == [0, 1, 2, 3, 4, 5, 6]


def _rows(tmp_path, monkeypatch, module: str, body: str) -> list[str]:
    """Overrides for a run whose rows are scored by `module:score` (each test its own module:
    a verifier is imported once per process)."""
    data = _verifier_rows(tmp_path, monkeypatch, module, body)
    return [f"data.train=[{{name: {data}}}]", f"rewards.custom_verifiers=[{module}:score]",
            "data.eval_holdout=4"]


def test_a_verifier_failing_every_sample_stops_the_run_under_active_sampling(
        tmp_path, monkeypatch, capsys):
    """Active sampling keeps only groups with reward spread, so a verifier failing every sample
    left none, and judged on them no step had failed: the run went on, exit 0."""
    rows = _rows(tmp_path, monkeypatch, "stops_raising_verifier",
                 "def score(completion, ground_truth):\n    raise RuntimeError('broken')\n")
    code = main(["train", *TINY, *rows, "algorithm.active_sampling=true",
                 f"experiment.output_dir={tmp_path / 'run'}"])
    assert code == 5, capsys.readouterr().err
    assert "stops_raising_verifier:score: RuntimeError: broken" in capsys.readouterr().err


def test_a_run_without_learning_signal_stops_with_exit_6_and_its_state(
        tmp_path, monkeypatch, capsys):
    """Every group's rewards equal, step after step: nothing was learnt, and the run used to
    end 0 as if it had trained."""
    why = "no sample earned any reward"
    rows = _rows(tmp_path, monkeypatch, "stops_flat_zero",
                 "def score(completion, ground_truth):\n    return 0.0\n")
    out = tmp_path / "run"
    code = main(["train", *TINY, *rows, "algorithm.max_steps_without_update=4",
                 "checkpoint.checkpoint_state_freq=0",
                 f"experiment.output_dir={out}"])
    err = capsys.readouterr().err
    assert code == 6, err
    assert "no learning signal in 4 steps in a row (up to step 4" in err and why in err
    assert load_latest_state(out / "state").step == 4  # saved, though no state was due
    logged = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
    assert [r["batch/learning_signal"] for r in logged[1:]] == [0.0] * 4


def test_0_never_stops_a_run_without_learning_signal(tmp_path, monkeypatch):
    rows = _rows(tmp_path, monkeypatch, "stops_flat_never",
                 "def score(completion, ground_truth):\n    return 0.0\n")
    assert main(["train", *TINY, *rows, "algorithm.max_steps_without_update=0",
                 f"experiment.output_dir={tmp_path / 'run'}"]) == 0


@pytest.mark.parametrize("rewards, why", [
    ([0.0, 0.0], "no sample earned any reward"),
    ([1.0, 1.0], "every sample earned the full reward: the data is solved"),
    ([0.25, 0.5], "each prompt's samples all scored alike (mean reward 0.375)"),
])
def test_the_stop_says_why_the_rewards_were_flat(tmp_path, rewards, why):
    from types import SimpleNamespace

    from rlvr.run.stopping import Streaks, _no_signal_message

    run = SimpleNamespace(state_dir=tmp_path / "state")
    message = _no_signal_message(run, 7, Streaks(without_signal=2, rewards_without_signal=rewards),
                                 2)
    assert why in message and "step 7" in message and "max_steps_without_update" in message


def test_every_prompt_retired_stops_with_exit_6_and_the_last_state(tmp_path, monkeypatch,
                                                                    capsys):
    """Once every prompt was retired as solved, the mixer raised a bare RuntimeError: a
    traceback, exit 1, and no state of the steps since the last one saved."""
    (tmp_path / "stops_always_right.py").write_text(
        "def score(completion, ground_truth):\n    return 1.0\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    data = tmp_path / "eight.jsonl"
    data.write_text("".join(json.dumps({"prompt": f"{i} + 1?", "ground_truth": str(i + 1),
                                        "dataset": "stops_always_right:score"}) + "\n"
                            for i in range(12)))
    out = tmp_path / "run"
    code = main(["train", *TINY, f"data.train=[{{name: {data}}}]", "data.eval_holdout=4",
                 "rewards.custom_verifiers=[stops_always_right:score]",
                 "algorithm.no_resampling_pass_rate=0.5", "checkpoint.checkpoint_state_freq=0",
                 f"experiment.output_dir={out}"])
    err = capsys.readouterr().err
    assert code == 6, err
    assert "is retired, solved at algorithm.no_resampling_pass_rate" in err
    assert "the training state of step 2 is in" in err and "Traceback" not in err
    assert load_latest_state(out / "state").step == 2  # 8 prompts, 4 a step: step 3 had none
