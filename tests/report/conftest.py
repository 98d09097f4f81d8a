"""A fake run directory, as a run writes it: config.yaml, metrics.jsonl, distributions.jsonl,
trace files."""

import json
from pathlib import Path

import numpy as np
import pytest
import yaml

from rlvr.metrics.distributions import StepDistributions
from rlvr.metrics.traces import TraceWriter, eval_rows, training_rows
from rlvr.types import Completion, Prompt, RewardOutcome, Sample

CONFIG = {"experiment": {"name": "fake", "seed": 1, "output_dir": "runs/fake",
                         "total_episodes": 32},
          "model": {"name_or_path": "tiny-llama"}, "data": {"train": [{"name": "addition"}]},
          "rollout": {"num_unique_prompts_rollout": 2, "num_samples_per_prompt_rollout": 4,
                      "response_length": 16, "temperature": 1.0},
          "algorithm": {"loss_fn": "dapo", "beta": 0.0}, "optimizer": {"learning_rate": 1e-5},
          "eval": {"local_eval_every": 2},
          "health": {"clipfrac_max": 0.25}}  # the other bounds at their defaults


def step_metrics(step: int) -> dict:
    row = {"training_step": step, "episode": 8.0 * step, "time/elapsed": 10.0 * step + 1}
    if step % 2 == 0:
        row.update({"eval/scores": 0.1 * step, "eval/pass_at_1": 0.1 * step,
                    "eval/sequence_lengths": 12.0, "time/eval": 0.5})
    if step > 0:
        row.update({"objective/verifiable_reward": 0.2 + 0.05 * step,
                    "objective/scores": 0.15 + 0.05 * step, "policy/entropy_avg": 1.5 - 0.1 * step,
                    "objective/kl1_avg": 0.01 * step, "val/sequence_lengths": 14.0 - step,
                    "val/stop_rate": 0.9, "policy/clipfrac_avg": 0.02, "loss/policy_avg": 0.1,
                    "learner_tokens_per_second_step": 300.0, "time/generation": 5.0,
                    "time/scoring": 1.0, "time/training": 3.0, "time/weight_sync": 0.2,
                    "time/step": 8.2,
                    # the health gates' signals (the verifier's: 1 failure of 8 samples at 3)
                    "debug/engine_vs_local_logprob_diff_mean": 0.01 * step,
                    "debug/engine_vs_local_kl": 0.001 * step, "batch/prompts_sampled": 2.0,
                    "reward/verifier_errors": float(step == 3)})
    return row


def step_distributions(step: int) -> dict:
    """distributions.jsonl's line of a step: rewards 0..step, lengths 10..13 by step."""
    values = {"reward": [float(k) for k in range(step + 1)],
              "response_length": [10.0 + step + k for k in range(4)],
              "advantage": [-1.0, 1.0], "learner_engine_ratio": [0.9, 1.0, 1.1]}
    summaries = StepDistributions({k: np.array(v) for k, v in values.items()}).summaries()
    return {"training_step": step, **{k: s.to_json() for k, s in summaries.items()}}


def _sample(step: int, i: int, k: int, reward: float) -> Sample:
    prompt = Prompt(id=f"addition/{i}", messages=({"role": "user", "content": f"{i} + 1 = ?"},),
                    token_ids=(1, 2, 3), ground_truth=str(i + 1), verifiers=("last_number",),
                    source="addition")
    text = f"<b>step {step}</b> prompt {i} sample {k}: {i + 1 if reward else 0}"
    return Sample(prompt=prompt, completion=Completion(
        token_ids_T=[7] * 5, logprobs_T=[0.0] * 5, finish_reason="stop", text=text,
        model_version=max(step - 1, 0)), reward=reward)


def make_run(root: Path, steps: int = 4, name: str = "run_a", distributions: bool = True
             ) -> Path:
    """A run of `steps` steps (out of 4 configured): 2 prompts x 4 samples per step, eval of
    6 prompts at every even step; `distributions`: with distributions.jsonl (False: a run
    from before they were recorded)."""
    run = root / name
    run.mkdir(parents=True)
    (run / "config.yaml").write_text(yaml.safe_dump(CONFIG))
    (run / "metrics.jsonl").write_text(
        "".join(json.dumps(step_metrics(s)) + "\n" for s in range(steps + 1)))
    if distributions:
        (run / "distributions.jsonl").write_text(
            "".join(json.dumps(step_distributions(s)) + "\n" for s in range(1, steps + 1)))
    writer = TraceWriter(run / "traces")
    for step in range(steps + 1):
        if step > 0:
            groups = [[_sample(step, i, k, float(k % 2)) for k in range(4)] for i in range(2)]
            outcomes = [[RewardOutcome(score=s.reward, per_verifier={"last_number": s.reward})
                         for s in g] for g in groups]
            writer.write_train(step, training_rows(step, groups, outcomes, groups[0]))
        if step % 2 == 0:
            samples = [_sample(step, i, 0, float(i < step)) for i in range(6)]
            writer.write_eval(step, eval_rows(step, "addition", samples, [
                RewardOutcome(score=s.reward) for s in samples]))
    return run


@pytest.fixture
def fake_run(tmp_path) -> Path:
    return make_run(tmp_path)
