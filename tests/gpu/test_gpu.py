"""What only a GPU can show: a learner step on CUDA in bf16, a colocated step (learner and a
sleeping vLLM engine on one GPU), and a weight sync over NCCL into vLLM. Each compares with
the CPU path where one exists. Run: `pytest -m gpu tests/gpu -v` (needs `pip install vllm`
for the last two)."""

from __future__ import annotations

import json
import os

import pytest
import torch

from rlvr.algorithm.losses import LossParams, compute_policy_loss
from rlvr.algorithm.packing import SequenceToPack, pack_sequences
from rlvr.config import load_config
from rlvr.device import resolve_device
from rlvr.learner import Learner, LearnerSettings
from rlvr.models import load_causal_lm

ROOT = os.path.join(os.path.dirname(__file__), "..", "..")
TINY = os.path.join(ROOT, "configs", "tiny.yaml")


def _batch():
    gen = torch.Generator().manual_seed(0)
    seqs = [SequenceToPack(torch.randint(3, 250, (6,), generator=gen).tolist(),
                           torch.randint(3, 250, (5 + i,), generator=gen).tolist(),
                           [-5.0] * (5 + i), advantage=(-1.0) ** i, index=i) for i in range(8)]
    return pack_sequences(seqs, pack_length=64)


def _update(model, device, bf16):
    settings = LearnerSettings(learning_rate=1e-3, lr_scheduler_type="constant",
                               warm_up_steps=0, total_optimizer_steps=2, bf16_autocast=bf16)
    learner = Learner(model.to(device), None, settings, device=device)
    batch = _batch()
    params = LossParams(0.2, 0.28, 0.0, 2, float(batch.num_response_tokens))
    return learner.update(batch, lambda i: compute_policy_loss("dapo", i, params), 2, 1, 1.0)


def test_a_learner_step_on_cuda_matches_the_cpu_step(tiny_model_dir):
    device = resolve_device("cuda")
    assert device.backend == "nccl" and device.pin_memory
    cpu = _update(load_causal_lm(tiny_model_dir), torch.device("cpu"), bf16=False)
    gpu = _update(load_causal_lm(tiny_model_dir), device.torch, bf16=False)
    assert gpu.entropy_sum == pytest.approx(cpu.entropy_sum, rel=1e-4)
    assert gpu.grad_norm == pytest.approx(cpu.grad_norm, rel=1e-3)
    mixed = _update(load_causal_lm(tiny_model_dir), device.torch, bf16=True)
    assert mixed.entropy_sum == pytest.approx(cpu.entropy_sum, rel=2e-2)
    assert {"memory/allocated_gb", "memory/reserved_gb", "memory/peak_gb"} <= set(gpu.memory)


def test_one_colocated_step_sleeps_vllm_for_the_update(tmp_path):
    pytest.importorskip("vllm")
    from rlvr.run.loop import train

    out = tmp_path / "run"
    cfg = load_config(TINY, [f"experiment.output_dir={out}", "experiment.total_episodes=32",
                             "model.device=cuda", "rollout.engine=vllm", "rollout.colocate=true",
                             "rollout.vllm.gpu_memory_utilization=0.3",
                             "rollout.vllm.max_model_len=256", "eval.local_eval_every=0",
                             "algorithm.filter_zero_std_samples=false"])
    train(cfg)
    rows = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
    assert [r["training_step"] for r in rows if "loss/policy_avg" in r] == [1, 2]
    assert all(r["memory/peak_gb"] > 0 for r in rows if "loss/policy_avg" in r)
    # After the update the engine woke and took the new weights: its logprobs match.
    assert rows[-1]["debug/engine_vs_local_logprob_diff_mean"] < 2e-2


def test_weights_reach_vllm_engine_actors_over_nccl(tmp_path):
    """Learner rank 0 broadcasts to a vLLM engine actor on its own GPU (NCCL, in buckets);
    the engine's logprobs then match the learner's."""
    pytest.importorskip("vllm")
    pytest.importorskip("ray")
    if torch.cuda.device_count() < 2:
        pytest.skip("needs 2 GPUs: a learner and an engine")
    from rlvr.run.loop import train

    out = tmp_path / "run"
    cfg = load_config(TINY, [f"experiment.output_dir={out}", "experiment.total_episodes=48",
                             "model.device=cuda", "rollout.engine=vllm",
                             "distributed.launcher=ray", "rollout.num_engines=1",
                             "rollout.vllm.gpu_memory_utilization=0.5",
                             "rollout.vllm.max_model_len=256", "rollout.weight_sync_bucket_mb=1",
                             "eval.local_eval_every=0", "algorithm.filter_zero_std_samples=false"])
    train(cfg)
    rows = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
    steps = [r for r in rows if "loss/policy_avg" in r]
    assert len(steps) == 3 and all(r["time/weight_sync"] > 0 for r in steps)
    # Steps 2 and 3 sample from weights that arrived over NCCL.
    assert all(r["debug/engine_vs_local_logprob_diff_mean"] < 2e-2 for r in steps)
