"""The learner's update: accumulation does not change the gradient; weights move; lr schedule."""

import pytest
import torch

from rlvr.algorithm.losses import LossParams, compute_policy_loss
from rlvr.algorithm.packing import SequenceToPack, pack_sequences
from rlvr.learner import Learner, LearnerSettings


def _batch(n=8, pack_length=24):
    gen = torch.Generator().manual_seed(3)
    seqs = []
    for i in range(n):
        p, r = 4 + i % 3, 3 + (i * 5) % 7
        seqs.append(SequenceToPack(torch.randint(3, 250, (p,), generator=gen).tolist(),
                                   torch.randint(3, 250, (r,), generator=gen).tolist(),
                                   [-5.0] * r, advantage=(-1.0) ** i * (1 + i / 10), index=i))
    return pack_sequences(seqs, pack_length=pack_length)


def _settings(**kw):
    base = dict(learning_rate=1e-3, lr_scheduler_type="constant", warm_up_steps=0,
                total_optimizer_steps=10, max_grad_norm=1e9)
    return LearnerSettings(**{**base, **kw})


def _loss_fn(batch, beta=0.0):
    params = LossParams(clip_lower=0.2, clip_higher=0.28, beta=beta, kl_estimator=2,
                        denominator=float(batch.num_response_tokens))
    return lambda inputs: compute_policy_loss("dapo", inputs, params)


def _grads_after_update(model, batch, micro, reference=None, beta=0.0):
    learner = Learner(model, reference, _settings())
    captured = []
    learner.optimizer.step = lambda: captured.append(
        [p.grad.clone() for p in model.parameters() if p.grad is not None])
    learner.update(batch, _loss_fn(batch, beta), num_micro_batches=micro, num_epochs=1,
                   temperature=1.0)
    return captured[0]


def test_micro_batches_give_the_same_gradient(tiny_model_dir):
    from rlvr.models import load_causal_lm

    batch = _batch()
    assert batch.num_rows >= 4
    grads = {m: _grads_after_update(load_causal_lm(tiny_model_dir), batch, m) for m in (1, 2, 4)}
    for m in (2, 4):
        for g1, gm in zip(grads[1], grads[m]):
            torch.testing.assert_close(gm, g1, atol=1e-6, rtol=1e-4)


def test_update_moves_weights_and_reports_sums(tiny_model):
    batch = _batch()
    reference = Learner.frozen_copy(tiny_model)
    before = [p.detach().clone() for p in tiny_model.parameters()]
    learner = Learner(tiny_model, reference, _settings())
    result = learner.update(batch, _loss_fn(batch, beta=0.1), num_micro_batches=2, num_epochs=2,
                            temperature=1.0)
    assert any(not torch.equal(b, p) for b, p in zip(before, tiny_model.parameters()))
    assert result.num_response_tokens == batch.num_response_tokens
    assert result.entropy_sum > 0 and result.grad_norm > 0 and result.skipped_steps == 0
    assert result.engine_diff_max > 0  # engine logprobs were fixed at -5
    assert not any(p.requires_grad for p in reference.parameters())


def test_warmup_schedule_reports_the_rate_used(tiny_model):
    batch = _batch(n=2)
    learner = Learner(tiny_model, None, _settings(lr_scheduler_type="linear", warm_up_steps=2,
                                                  total_optimizer_steps=4))
    rates = [learner.update(batch, _loss_fn(batch), 1, 1, 1.0).learning_rate for _ in range(4)]
    assert rates == pytest.approx([0.0, 5e-4, 1e-3, 5e-4])


def test_two_packings_give_the_same_gradient(tiny_model_dir):
    """Groups packed one sequence per unit in short rows, or sharing prompts first-fit in long
    rows: the same loss, the same gradient."""
    from rlvr.models import load_causal_lm

    gen = torch.Generator().manual_seed(5)
    seqs = []
    for group in range(3):
        prompt = torch.randint(3, 250, (4 + group,), generator=gen).tolist()
        for k in range(4):
            n = 2 + (group + 3 * k) % 5
            seqs.append(SequenceToPack(prompt, torch.randint(3, 250, (n,), generator=gen).tolist(),
                                       [-5.0] * n, advantage=(-1.0) ** k * (k + 1) / 4,
                                       index=len(seqs)))
    plain = pack_sequences(seqs, pack_length=12, share_prompts=False)
    shared = pack_sequences(seqs, pack_length=40, share_prompts=True,
                            strategy="first_fit_decreasing")
    assert plain.num_rows > shared.num_rows and plain.num_tokens > shared.num_tokens
    g_plain = _grads_after_update(load_causal_lm(tiny_model_dir), plain, 2)
    g_shared = _grads_after_update(load_causal_lm(tiny_model_dir), shared, 1)
    for a, b in zip(g_plain, g_shared):
        torch.testing.assert_close(a, b, atol=1e-6, rtol=1e-4)


def _model_with_dropout(tiny_model_dir):
    from transformers import AutoConfig, AutoModelForCausalLM

    config = AutoConfig.from_pretrained(tiny_model_dir)
    config.attention_dropout = 0.1
    torch.manual_seed(0)
    return AutoModelForCausalLM.from_config(config, attn_implementation="sdpa")


def test_dropout_is_off_so_epochs_see_the_same_function(tiny_model_dir):
    # At learning rate ~0 the second epoch recomputes exactly the first epoch's logprobs: ratio
    # 1 on every token, variance 0. With attention dropout left on (before the fix) each pass
    # drew its own noise and val/ratio_var read about 1e-4.
    from rlvr.algorithm.losses import summarize_loss_metrics

    batch = _batch()
    model = _model_with_dropout(tiny_model_dir)
    learner = Learner(model, Learner.frozen_copy(model), _settings(learning_rate=1e-12))
    result = learner.update(batch, _loss_fn(batch, beta=0.1), num_micro_batches=1, num_epochs=2,
                            temperature=1.0)
    metrics = summarize_loss_metrics(result.loss_sums)
    assert metrics["val/ratio_var"] == 0.0 and metrics["val/ratio"] == pytest.approx(1.0)
    assert metrics["objective/kl0_avg"] == pytest.approx(0.0, abs=1e-6)  # ref sees no noise


def test_disable_dropout_zeroes_modules_and_attention_rates(tiny_model_dir):
    from rlvr.learner.dropout import disable_dropout

    model = _model_with_dropout(tiny_model_dir)
    model.extra = torch.nn.Dropout(0.3)
    # Each layer's attention rate, the extra module, and the config the attention reads from.
    assert disable_dropout(model) == model.config.num_hidden_layers + 2
    assert model.config.attention_dropout == 0.0
    assert all(getattr(m, "attention_dropout", 0.0) == 0.0 for m in model.modules())
    assert model.extra.p == 0.0


def test_steps_without_a_batch_still_move_the_schedule(tiny_model):
    # Linear decay over 4 steps: steps 1 and 3 had no batch. The rate is the schedule's at each
    # step, so step 2 trains at 1e-3 * (1 - 1/4) and step 4 at 1e-3 * (1 - 3/4); counting only
    # updates (before the fix) gave 1e-3 and 7.5e-4, and the decay never reached its end.
    batch = _batch(n=2)
    learner = Learner(tiny_model, None, _settings(lr_scheduler_type="linear",
                                                  total_optimizer_steps=4))
    rates = []
    for step in range(1, 5):
        if step % 2:
            learner.skip_update(num_epochs=1)
        else:
            rates.append(learner.update(batch, _loss_fn(batch), 1, 1, 1.0).learning_rate)
    assert rates == pytest.approx([7.5e-4, 2.5e-4])
    assert learner.scheduler.get_last_lr()[0] == pytest.approx(0.0)


def test_bf16_autocast_runs_on_the_weights_device(tiny_model):
    # The autocast device comes from the policy's parameters (cpu here, cuda on a GPU).
    import math

    batch = _batch(n=2)
    learner = Learner(tiny_model, None, _settings(bf16_autocast=True))
    result = learner.update(batch, _loss_fn(batch), 1, 1, 1.0)
    assert math.isfinite(result.grad_norm) and result.grad_norm > 0


def test_a_token_budget_cuts_micro_batches_without_changing_the_gradient(tiny_model_dir):
    """verl's dynamic batch size: micro-batches of at most N token slots; the loss is
    normalised over the whole batch, so the gradient equals the one-micro-batch gradient."""
    from rlvr.algorithm.packing import micro_batch_cost, plan_micro_batches
    from rlvr.models import load_causal_lm

    batch = _batch(n=12, pack_length=24)
    row_tokens = [sum(lens) for lens in batch.seq_lens_per_row]
    budget = 48  # two full rows
    parts = plan_micro_batches(row_tokens, 1, budget)
    assert len(parts) >= 3 and all(micro_batch_cost([row_tokens[r] for r in p]) <= budget
                                   for p in parts)

    def grads(settings):
        model = load_causal_lm(tiny_model_dir)
        learner = Learner(model, None, settings)
        seen = []
        forward = learner.forward_fn
        learner.forward_fn = lambda m, b, t, e: (seen.append(b.input_ids_RL.numel()),
                                                 forward(m, b, t, e))[1]
        captured = []
        learner.optimizer.step = lambda: captured.append(
            [p.grad.clone() for p in model.parameters() if p.grad is not None])
        learner.update(batch, _loss_fn(batch), num_micro_batches=1, num_epochs=1,
                       temperature=1.0)
        return captured[0], seen

    whole, seen_whole = grads(_settings())
    cut, seen_cut = grads(_settings(max_tokens_per_micro_batch=budget))
    assert len(seen_whole) == 1 and len(seen_cut) == len(parts)
    assert max(seen_cut) <= budget  # padding columns trimmed: the budget bounds the tensors
    for g1, g2 in zip(whole, cut):
        torch.testing.assert_close(g2, g1, atol=1e-6, rtol=1e-4)
