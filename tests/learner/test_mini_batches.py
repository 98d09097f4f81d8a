"""Mini-batches as open-instruct means them: k mini-batches are k optimizer steps, each loss
divided by its own mini-batch's token count, old logprobs from before the first step.

The policy is one scalar weight w whose logprob for every response token is w itself, so the
DAPO loss of a mini-batch is -sum_t(A_t) * exp(w - w_old) / D and every number below can be
worked out by hand (AdamW written out, no weight decay, no clipping)."""

import math

import pytest
import torch

from rlvr.algorithm.losses import LossParams, PolicyLoss
from rlvr.algorithm.mini_batches import mini_batch_count, split_mini_batches
from rlvr.algorithm.packing import SequenceToPack, pack_sequences
from rlvr.learner import Learner, LearnerSettings, MiniBatch

LR, BETA1, BETA2, EPS = 0.1, 0.9, 0.999, 1e-8


class ScalarPolicy(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.w = torch.nn.Parameter(torch.zeros(()))


def scalar_forward(model, batch, temperature, with_entropy):
    """Every position's logprob is w ([R, L], a new tensor as a real forward's); entropy 0."""
    logprobs_RL = model.w * torch.ones(batch.input_ids_RL.shape)
    return logprobs_RL, torch.zeros(batch.input_ids_RL.shape) if with_entropy else None


def _batch():
    """Four rows (pack_length fits one sequence): 2 + 2 response tokens with advantage +1, then
    3 tokens with -1 and 3 with +0.5. Engine logprobs 0 = the policy's at w = 0."""
    spec = [(2, 1.0), (2, 1.0), (3, -1.0), (3, 0.5)]
    seqs = [SequenceToPack([7], [5] * n, [0.0] * n, advantage=a, index=i)
            for i, (n, a) in enumerate(spec)]
    batch = pack_sequences(seqs, pack_length=4)
    assert batch.num_rows == 4
    return batch


def _learner():
    settings = LearnerSettings(learning_rate=LR, lr_scheduler_type="constant", warm_up_steps=0,
                               total_optimizer_steps=10, max_grad_norm=1e9,
                               betas=(BETA1, BETA2), eps=EPS)
    return Learner(ScalarPolicy(), None, settings, forward_fn=scalar_forward,
                   device=torch.device("cpu"))


def _loss(denominator):
    params = LossParams(clip_lower=0.2, clip_higher=0.28, beta=0.0, kl_estimator=2,
                        denominator=float(denominator))
    return PolicyLoss("dapo", params)


def _adam(grads):
    """w after AdamW steps with these gradients (bias-corrected, weight decay 0), from w = 0."""
    w = m = v = 0.0
    for t, g in enumerate(grads, start=1):
        m = BETA1 * m + (1 - BETA1) * g
        v = BETA2 * v + (1 - BETA2) * g * g
        w -= LR * (m / (1 - BETA1 ** t)) / (math.sqrt(v / (1 - BETA2 ** t)) + EPS)
    return w


def test_k_mini_batches_are_k_steps_with_their_own_denominators():
    batch = _batch()
    parts = split_mini_batches(batch, 2)
    assert [p.num_response_tokens for p in parts] == [4, 6]  # rows [0, 1] and [2, 3]
    learner = _learner()
    result = learner.update_mini_batches(
        [MiniBatch(p, _loss(mini_batch_count(p, "token"))) for p in parts], num_epochs=1,
        temperature=1.0)
    w = learner.policy.w.item()
    # Step 1, at w = w_old = 0: g1 = -(1 + 1 + 1 + 1) / 4 = -1; Adam's first step is -lr*sign:
    # w1 = 0.1. Step 2: old logprobs are still w_old = 0 (taken before step 1), the ratio is
    # e^0.1 = 1.10517 (inside the clip range [0.8, 1.28]), g2 = -(3 * -1 + 3 * 0.5) / 6 * e^0.1
    # = 0.25 e^0.1 = 0.27629. m2 = 0.9 * -0.1 + 0.1 * 0.27629 = -0.06237, v2 = 0.000999 +
    # 0.001 * 0.27629^2 = 0.0010753; m2/(1-0.81) / sqrt(v2/(1-0.998001)) = -0.44757, so
    # w2 = 0.1 + 0.1 * 0.44757 = 0.14476.
    want = _adam([-1.0, 0.25 * math.exp(0.1)])
    assert want == pytest.approx(0.144757, abs=1e-6)
    assert w == pytest.approx(want, abs=1e-6)
    assert learner.scheduler.last_epoch == 2  # the schedule counts both optimizer steps
    assert result.num_response_tokens == 10 and result.num_sequences == 4
    # One step over the whole batch: g = -(4 - 3 + 1.5) / 10 = -0.25, w = 0.1. The sum of the
    # two steps' updates differs from it.
    whole = _learner()
    whole.update(batch, _loss(batch.num_response_tokens), num_micro_batches=1, num_epochs=1,
                 temperature=1.0)
    assert whole.policy.w.item() == pytest.approx(_adam([-0.25]), abs=1e-7)
    assert abs(w - whole.policy.w.item()) > 0.04
    # Dividing both mini-batches by the whole batch's count (10) instead would change the ratio
    # of the two gradients, and so Adam's second step: the denominators are per mini-batch.
    assert _adam([-4 / 10, 1.5 / 10 * math.exp(0.1)]) != pytest.approx(want, abs=1e-3)


def test_micro_batches_inside_a_mini_batch_do_not_change_its_step():
    batch = _batch()
    ws = []
    for micro in (1, 2):
        learner = _learner()
        learner.update_mini_batches(
            [MiniBatch(p, _loss(mini_batch_count(p, "token")), micro)
             for p in split_mini_batches(batch, 2)], num_epochs=1, temperature=1.0)
        ws.append(learner.policy.w.item())
    assert ws[0] == pytest.approx(ws[1], abs=1e-7)


def test_epochs_repeat_the_mini_batches_in_order():
    batch = _batch()
    learner = _learner()
    learner.update_mini_batches([MiniBatch(p, _loss(mini_batch_count(p, "token")))
                                 for p in split_mini_batches(batch, 2)], num_epochs=2,
                                temperature=1.0)
    assert learner.scheduler.last_epoch == 4  # 2 epochs x 2 mini-batches
    # The old logprobs stay those from before the first step (w_old = 0) in every epoch.
    grads = []
    w = m = v = 0.0
    for t, (count, adv_sum) in enumerate([(4, 4.0), (6, -1.5)] * 2, start=1):
        g = -adv_sum / count * _clipped_ratio(math.exp(w), adv_sum)
        grads.append(g)
        m = BETA1 * m + (1 - BETA1) * g
        v = BETA2 * v + (1 - BETA2) * g * g
        w -= LR * (m / (1 - BETA1 ** t)) / (math.sqrt(v / (1 - BETA2 ** t)) + EPS)
    assert learner.policy.w.item() == pytest.approx(w, abs=1e-6)


def _clipped_ratio(ratio, adv_sum):
    """The ratio's gradient factor under DAPO's clip (1 - 0.2, 1 + 0.28): 0 once clipped on the
    side the advantage pushes (all tokens of a mini-batch here share that side)."""
    if adv_sum > 0 and ratio > 1.28 or adv_sum < 0 and ratio < 0.8:
        return 0.0
    return ratio


def test_split_keeps_rows_whole_and_never_drops_one():
    batch = _batch()
    assert split_mini_batches(batch, 1) == [batch]
    parts = split_mini_batches(batch, 3)  # 4 rows: 2 + 1 + 1 (open-instruct would drop one)
    assert [p.num_rows for p in parts] == [2, 1, 1]
    assert sum(p.num_sequences for p in parts) == 4
    assert len(split_mini_batches(batch, 6)) == 4  # fewer rows than mini-batches
    assert mini_batch_count(parts[0], "sequence") == 2
