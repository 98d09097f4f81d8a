"""Compiled decoder layers (`model.compile`): the same logprobs, gradients and updates as eager,
one graph for every layer and for batches of other shapes, each model compiled on its own
layers, LoRA included; a model without a layer list is refused by name.

The logprob and gradient test compiles with inductor, as runs do; the learner tests use
aot_eager, which captures the same graphs (forward, backward, guards) without generating code,
because a cold inductor compile costs 10-20 s a graph on 2 cores."""

from __future__ import annotations

import contextlib

import pytest
import torch
from torch._dynamo.utils import counters

from rlvr.algorithm.losses import LossParams, PolicyLoss
from rlvr.algorithm.packing import SequenceToPack, pack_sequences
from rlvr.learner import Learner, LearnerSettings
from rlvr.learner.compiling import compile_decoder_layers
from rlvr.learner.forward import forward_logprobs
from rlvr.models import decoder_layers

# torch.compile builds C++ kernels (seconds each): a component test, left out of make test-fast.
pytestmark = pytest.mark.component


def _batch(num_groups: int, seed: int, pack_length: int = 48):
    gen = torch.Generator().manual_seed(seed)
    seqs = []
    for g in range(num_groups):
        prompt = torch.randint(3, 250, (4 + g % 3,), generator=gen).tolist()
        for k in range(3):
            n = 2 + (g + 2 * k) % 5
            seqs.append(SequenceToPack(prompt, torch.randint(3, 250, (n,), generator=gen).tolist(),
                                       [-5.0] * n, advantage=(-1.0) ** k, index=len(seqs)))
    return pack_sequences(seqs, pack_length=pack_length)


def _settings(**kw) -> LearnerSettings:
    return LearnerSettings(learning_rate=1e-3, lr_scheduler_type="constant", warm_up_steps=0,
                           total_optimizer_steps=10, max_grad_norm=1.0, **kw)


def _loss(batch) -> PolicyLoss:
    return PolicyLoss("dapo", LossParams(0.2, 0.28, 0.1, 2, float(batch.num_response_tokens)))


def _compiled_graphs() -> int:
    return counters["stats"]["unique_graphs"]


@pytest.fixture(autouse=True)
def _fresh_dynamo():
    torch._dynamo.reset()  # no graph of another test's model is reused or counted
    yield
    torch._dynamo.reset()


@pytest.mark.parametrize("attention", ["sdpa", "eager"])
def test_compiled_layers_give_eager_logprobs_and_gradients_with_one_graph(tiny_model_dir,
                                                                          attention):
    """With either attention the CPU learner uses: eager attention's additive mask, scores and
    float32 softmax are what inductor fuses."""
    from rlvr.models import load_causal_lm

    eager, compiled = (load_causal_lm(tiny_model_dir, attn_implementation=attention)
                       for _ in range(2))
    assert compile_decoder_layers(compiled) == len(decoder_layers(eager)) > 1
    graphs = _compiled_graphs()
    # Three shapes (rows x length); after the first, no shape compiles a new graph.
    for step, (groups, length) in enumerate([(4, 48), (6, 40), (5, 64)]):
        batch = _batch(groups, seed=step, pack_length=length)
        assert batch.num_rows > 1
        results = []
        for model in (eager, compiled):
            model.zero_grad()
            logprobs_RL, _ = forward_logprobs(model, batch, temperature=0.7)
            (logprobs_RL * batch.response_mask_RL).sum().backward()
            results.append((logprobs_RL.detach(), [p.grad.clone() for p in model.parameters()]))
        (want, want_grads), (got, got_grads) = results
        torch.testing.assert_close(got, want, atol=1e-5, rtol=1e-5)
        for g, w in zip(got_grads, want_grads):
            torch.testing.assert_close(g, w, atol=1e-5, rtol=1e-4)
        if step == 0:
            first = _compiled_graphs() - graphs
            assert first >= 1
    assert _compiled_graphs() - graphs == first  # one graph served every layer and shape


def test_a_compiling_learner_updates_as_an_eager_one(tiny_model_dir):
    """Policy and reference each compiled on their own layers: the reference's compiled
    `forward` is its own layers', not the policy's it was copied from."""
    from rlvr.models import load_causal_lm

    learners = []
    for compile_ in (False, True):
        policy = load_causal_lm(tiny_model_dir)
        learners.append(Learner(policy, Learner.frozen_copy(policy),
                                _settings(compile_backend="aot_eager" if compile_ else None)))
    eager, compiled = learners
    for model in (compiled.policy, compiled.reference):
        for layer in decoder_layers(model):
            assert layer.forward._torchdynamo_orig_callable.__self__ is layer
    for step in range(2):
        batch = _batch(4, seed=10 + step)
        want = eager.update(batch, _loss(batch), 2, 1, 1.0)
        got = compiled.update(batch, _loss(batch), 2, 1, 1.0)
        assert got.grad_norm == pytest.approx(want.grad_norm, rel=1e-4)
        for key, value in want.loss_sums.items():
            assert got.loss_sums[key] == pytest.approx(value, rel=1e-4, abs=1e-5), key
    compiled.update_reference(0.5)
    eager.update_reference(0.5)
    got, want = dict(compiled.named_weights()), dict(eager.named_weights())
    for name in want:
        torch.testing.assert_close(got[name], want[name], atol=1e-5, rtol=1e-4, msg=name)


def test_a_compiled_lora_policy_switches_its_adapters_off_for_the_reference(tiny_model_dir):
    from rlvr.learner.lora import LoraSettings, adapters_disabled, wrap_lora
    from rlvr.models import load_causal_lm

    lora = LoraSettings(rank=4, alpha=8.0, init_seed=3)
    eager, compiled = (Learner(wrap_lora(load_causal_lm(tiny_model_dir), lora), None,
                               _settings(compile_backend="aot_eager" if c else None),
                               reference_is_base=True)
                       for c in (False, True))
    batch = _batch(3, seed=20)
    want = eager.update(batch, _loss(batch), 1, 1, 1.0)
    got = compiled.update(batch, _loss(batch), 1, 1, 1.0)
    for key, value in want.loss_sums.items():  # the KL term reads the base's logprobs
        assert got.loss_sums[key] == pytest.approx(value, rel=1e-4, abs=1e-5), key
    # Without gradients both ways run the same graph's inputs: the switch must still count.
    batch = _batch(3, seed=30)
    with torch.no_grad():
        for adapters_on in (True, False, True):
            results = []
            for learner in (eager, compiled):
                with contextlib.ExitStack() as stack:
                    if not adapters_on:
                        stack.enter_context(adapters_disabled(learner.policy))
                    results.append(forward_logprobs(learner.policy, batch, 1.0)[0])
            torch.testing.assert_close(results[1], results[0], atol=1e-5, rtol=1e-5)
        with adapters_disabled(compiled.policy):
            base = forward_logprobs(compiled.policy, batch, 1.0)[0]
        assert not torch.allclose(base, results[1])  # the trained adapters change the logprobs


def test_a_model_without_a_layer_list_is_refused():
    class Flat(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.blocks = torch.nn.Sequential(torch.nn.Linear(2, 2))

    with pytest.raises(ValueError, match=r"model.compile: Flat keeps no decoder `layers`"):
        compile_decoder_layers(Flat())


def test_the_config_reaches_the_learner():
    from rlvr.config.loading import load_config
    from rlvr.settings import learner_settings

    cfg = load_config(None, ["model.compile=true"])
    assert learner_settings(cfg).compile_backend == "inductor"
    assert learner_settings(load_config(None, [])).compile_backend is None
