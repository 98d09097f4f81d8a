"""The memory plan on a real CUDA allocator (`rlvr.learner.memory_plan`): probes read real
peaks, the fit predicts a real update's peak, checkpointing is chosen when a row fits only with
it, and a GPU too small for one row stops the run. CPU twins (faked allocator figures):
tests/learner/test_memory_plan.py. Run: `pytest -m gpu tests/gpu -v`."""

from __future__ import annotations

import dataclasses
import gc

import pytest
import torch

from rlvr.algorithm.losses import LossParams, compute_policy_loss
from rlvr.algorithm.packing import SequenceToPack, pack_sequences
from rlvr.device import reset_peak_memory
from rlvr.learner import Learner, LearnerSettings
from rlvr.learner.memory_plan import MARGIN_FRACTION, MemoryPlanError

CUDA = torch.device("cuda", 0)
ROW = 2048


def _model() -> torch.nn.Module:
    """Layers wide enough, and a vocabulary small enough, that the layers' activations are
    most of a pass's memory (so checkpointing them matters)."""
    from transformers import Qwen2Config, Qwen2ForCausalLM

    config = Qwen2Config(hidden_size=1024, num_hidden_layers=8, num_attention_heads=8,
                         num_key_value_heads=2, intermediate_size=4096, vocab_size=8192,
                         max_position_embeddings=4096, attn_implementation="sdpa")
    torch.manual_seed(0)
    with torch.device(CUDA):
        return Qwen2ForCausalLM(config)


def _learner(model, **kw) -> Learner:
    settings = dict(learning_rate=1e-6, lr_scheduler_type="constant", warm_up_steps=0,
                    total_optimizer_steps=4, bf16_autocast=True, gradient_checkpointing=None,
                    pack_length=ROW)
    return Learner(model, None, LearnerSettings(**{**settings, **kw}), device=CUDA)


def _batch(rows: int):
    gen = torch.Generator().manual_seed(1)
    seqs = []
    for i in range(rows * 4):  # four sequences of about a quarter row each
        prompt = torch.randint(3, 8000, (100,), generator=gen).tolist()
        n = ROW // 4 - 100 - i % 7
        seqs.append(SequenceToPack(prompt, torch.randint(3, 8000, (n,), generator=gen).tolist(),
                                   [-5.0] * n, advantage=(-1.0) ** i, index=i))
    return pack_sequences(seqs, ROW, share_prompts=True)


def test_the_fit_predicts_an_updates_peak():
    learner = _learner(_model())
    plan = learner.plan_memory()
    assert not plan.gradient_checkpointing  # a 0.1B model on a GPU of tens of GB
    assert plan.max_tokens_per_micro_batch >= 2 * ROW and plan.fit.per_token_bytes > 0
    batch = _batch(rows=2)
    params = LossParams(0.2, 0.28, 0.0, 2, float(batch.num_response_tokens))
    loss = lambda inputs: compute_policy_loss("dapo", inputs, params)  # noqa: E731
    learner.update(batch, loss, 1, 1, 1.0)  # the optimizer's state allocated
    before = reset_peak_memory(CUDA)
    learner.update(batch, loss, 1, 1, 1.0)
    peak = torch.cuda.max_memory_allocated(CUDA) - before
    # Real rows hold a prompt per response and fewer response tokens than the probes' rows;
    # the gradients (allocated during the pass here, kept by the probes) are the difference.
    gradients = sum(p.numel() * 4 for p in learner.trainable)
    predicted = plan.fit.fixed_bytes + plan.fit.per_token_bytes * batch.num_tokens + gradients
    assert peak <= 1.15 * predicted, (peak, predicted)


def test_checkpointing_is_chosen_when_a_row_fits_only_with_it():
    learner = _learner(_model())
    free = learner.plan_memory()
    row_without = free.fit.fixed_bytes + free.fit.per_token_bytes * ROW
    del learner
    gc.collect()
    # A limit leaving 60% of a row's memory without checkpointing, beside the weights, their
    # gradients and AdamW's two moments, less the margin.
    model = _model()
    learner = _learner(model)
    weights = torch.cuda.memory_allocated(CUDA)
    gradients = sum(p.numel() * 4 for p in learner.trainable)
    limit = (weights + 3 * gradients + 0.6 * row_without) / (1 - MARGIN_FRACTION)
    learner.settings = dataclasses.replace(learner.settings, max_memory_bytes=int(limit))
    plan = learner.plan_memory()
    assert plan.gradient_checkpointing and model.is_gradient_checkpointing
    assert plan.fit.per_token_bytes < free.fit.per_token_bytes


def test_a_gpu_without_room_for_one_row_stops_the_run():
    learner = _learner(_model(), max_memory_bytes=torch.cuda.memory_allocated(CUDA) + 2 ** 20)
    with pytest.raises(MemoryPlanError, match="pack_length"):
        learner.plan_memory()
