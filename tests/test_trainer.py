"""End to end on the tiny model: the CLI trains, logs, saves, and a checkpoint generates."""

import json

import pytest
import torch

from rlvr.cli import main
from rlvr.config import load_config
from rlvr.run.loop import train

REQUIRED = ["loss/policy_avg", "loss/kl_avg", "loss/total_avg", "policy/clipfrac_avg",
            "policy/entropy_avg", "val/ratio", "objective/verifiable_reward",
            "real_batch_size_ratio", "packed_ratio", "val/sequence_lengths", "val/stop_rate",
            "time/generation", "time/training", "learner_tokens_per_second_step", "learner_mfu",
            # the learner's device's memory gauge (`rlvr.device.memory_metrics`): model.device
            # is auto, so a GPU host trains on its GPU
            "memory/allocated_gb" if torch.cuda.is_available() else "memory/rss_gb",
            "episode"]


def test_tiny_config_trains_logs_saves_and_generates(tmp_path, capsys):
    out = tmp_path / "run"
    # With zero-std filtering off, every step updates (the random tiny model rarely scores).
    assert main(["train", "configs/tiny.yaml", f"experiment.output_dir={out}",
                 "algorithm.filter_zero_std_samples=false", "logging.progress_bar=false"]) == 0
    rows = [json.loads(l) for l in (out / "metrics.jsonl").read_text().splitlines()]
    assert [r["training_step"] for r in rows] == [0, 1, 2, 3]
    assert "eval/scores" in rows[0] and "eval/scores" in rows[2] and "eval/scores" in rows[3]
    for r in rows[1:]:
        assert not [k for k in REQUIRED if k not in r], r
    assert [r["episode"] for r in rows[1:]] == [16, 32, 48]
    assert (out / "config.yaml").exists() and (out / "final" / "model.safetensors").exists()
    assert [p.name for p in (out / "checkpoints").iterdir()] == ["step_000002"]
    capsys.readouterr()
    assert main(["generate", str(out / "checkpoints" / "step_000002"), "--prompt", "1+1?",
                 "--max-tokens", "5"]) == 0
    assert capsys.readouterr().out.startswith("[")


def test_bad_dataset_row_fails_before_training_naming_file_row_field(tmp_path, capsys):
    data = tmp_path / "bad.jsonl"
    data.write_text('{"prompt": "1+1?", "ground_truth": "2", "dataset": "gsm8k"}\n'
                    '{"prompt": "2+2?", "dataset": "gsm8k"}\n')
    # A model that cannot be loaded offline: the data error must come first.
    code = main(["train", "configs/tiny.yaml", f"experiment.output_dir={tmp_path / 'run'}",
                 f"data.train=[{{name: {data}}}]", "model.name_or_path=/nonexistent/model"])
    assert code == 2
    assert f"{data} line 2 field 'ground_truth': missing" in capsys.readouterr().err
    assert not (tmp_path / "run" / "metrics.jsonl").exists()


@pytest.mark.slow
def test_smollm2_trains_one_step(tmp_path):
    """The real model through the whole loop: 2 prompts x 4 samples, one update, one eval."""
    cfg = load_config("configs/quickstart.yaml", [
        f"experiment.output_dir={tmp_path}", "experiment.total_episodes=8",
        "rollout.num_unique_prompts_rollout=2", "rollout.num_samples_per_prompt_rollout=4",
        "rollout.response_length=16", "algorithm.filter_zero_std_samples=false",
        "data.eval_holdout=4", "eval.local_eval_every=1", "logging.progress_bar=false",
        # an in-process vLLM would rebind this pytest process's threads for the tests after
        "rollout.engine=transformers", "checkpoint.save_final=false"])
    run = train(cfg)
    last = run.history[-1]
    assert last["training_step"] == 1 and "eval/scores" in last and "loss/policy_avg" in last
    assert 0.0 <= last["objective/verifiable_reward"] <= 1.0


@pytest.mark.parametrize("task", ["ifeval_generated", "code_simple"])
def test_tiny_trains_on_instruction_following_and_code(tmp_path, task):
    """The IF and code datasets run end to end: generation, their verifiers, an update, eval."""
    cfg = load_config("configs/tiny.yaml", [
        f"experiment.output_dir={tmp_path}", "experiment.total_episodes=32",
        f"data.train=[{{name: {task}}}]", "data.max_prompt_length=256", "algorithm.pack_length=512",
        "algorithm.filter_zero_std_samples=false", "eval.local_eval_every=2",
        "logging.progress_bar=false", "checkpoint.save_final=false"])
    run = train(cfg)
    last = run.history[-1]
    assert last["training_step"] == 2 and "eval/scores" in last and "loss/policy_avg" in last
    assert all(r.get("reward/verifier_errors", 0.0) == 0.0 for r in run.history)
    assert all(r.get("reward/verifier_timeouts", 0.0) == 0.0 for r in run.history)
