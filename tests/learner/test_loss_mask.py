"""Tokens a workflow gave the model (loss mask 0) shape the context and nothing else: their
logprobs are not computed, and their advantage or engine logprob cannot move a gradient."""

import torch

from rlvr.algorithm.losses import LossInputs, LossParams, compute_policy_loss
from rlvr.algorithm.packing import SequenceToPack, pack_sequences
from rlvr.learner import Learner, LearnerSettings
from rlvr.learner.forward import forward_logprobs

PROMPT = [5, 6, 7, 8]
RESPONSE = [11, 12, 13, 14, 15, 16, 17, 18]
MASK = [1, 1, 1, 0, 0, 0, 1, 1]  # turn 1, three given tokens, turn 2


def _batch(advantage=1.0, given_logprob=-1.0, given_advantage=None):
    seqs = [SequenceToPack(PROMPT, RESPONSE, [-2.0 if m else given_logprob for m in MASK],
                           advantage=advantage, index=0, loss_mask=MASK),
            SequenceToPack(PROMPT, RESPONSE[:3], [-2.0] * 3, advantage=-advantage, index=1)]
    batch = pack_sequences(seqs, pack_length=64)
    if given_advantage is not None:  # what a bug would leak: values on the given tokens
        given = (batch.sequence_index_RL == 0) & ~batch.response_mask_RL & \
            (batch.segment_ids_RL > 0)
        batch.advantages_RL[given] = given_advantage
    return batch


def _grads(model_dir, batch):
    from rlvr.models import load_causal_lm

    model = load_causal_lm(model_dir)
    learner = Learner(model, None, LearnerSettings(
        learning_rate=1e-3, lr_scheduler_type="constant", warm_up_steps=0,
        total_optimizer_steps=1, max_grad_norm=1e9))
    captured = []
    learner.optimizer.step = lambda: captured.append(
        [p.grad.clone() for p in model.parameters() if p.grad is not None])
    params = LossParams(clip_lower=0.2, clip_higher=0.2, beta=0.0, kl_estimator=2,
                        denominator=float(batch.num_response_tokens))
    learner.update(batch, lambda inputs: compute_policy_loss("dapo", inputs, params), 1, 1, 1.0)
    return captured[0]


def test_given_tokens_are_in_the_sequence_but_not_in_the_response_mask():
    batch = _batch()
    row = batch.input_ids_RL[0].tolist()
    assert row[:len(PROMPT) + len(RESPONSE)] == PROMPT + RESPONSE  # attended to, in place
    mask = batch.response_mask_RL[0, len(PROMPT):len(PROMPT) + len(RESPONSE)].int().tolist()
    assert mask == MASK and batch.num_response_tokens == sum(MASK) + 3


def test_given_tokens_get_exactly_zero_gradient(tiny_model):
    batch = _batch()
    logprobs_RL, _ = forward_logprobs(tiny_model, batch, temperature=1.0)
    given_RL = (batch.segment_ids_RL > 0) & ~batch.response_mask_RL
    assert given_RL.sum() == 3
    assert torch.all(logprobs_RL[given_RL] == 0)  # never computed
    new_RL = logprobs_RL.detach().requires_grad_(True)
    out = compute_policy_loss("dapo", LossInputs(
        new_logprobs_RL=new_RL, old_logprobs_RL=logprobs_RL.detach(),  # ratio 1: no clipping
        advantages_RL=batch.advantages_RL, response_mask_RL=batch.response_mask_RL),
        LossParams(0.2, 0.2, 0.0, 2, float(batch.num_response_tokens)))
    (grad_RL,) = torch.autograd.grad(out.loss, new_RL)
    assert torch.all(grad_RL[given_RL] == 0) and torch.all(grad_RL[batch.response_mask_RL] != 0)


def test_values_on_given_tokens_cannot_move_the_weights(tiny_model_dir):
    plain = _grads(tiny_model_dir, _batch())
    poisoned = _grads(tiny_model_dir, _batch(given_logprob=-30.0, given_advantage=1e6))
    for a, b in zip(plain, poisoned, strict=True):
        assert torch.equal(a, b)
    moved = _grads(tiny_model_dir, _batch(advantage=2.0))  # a model token's advantage does
    assert any(not torch.equal(a, b) for a, b in zip(plain, moved))
