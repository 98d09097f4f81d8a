"""Compiled decoder layers and vocabulary head (`model.compile`): the same logprobs, entropies,
gradients and updates as eager, one graph for every layer and for batches of other shapes, one
for every chunk of logits, each model compiled on its own layers, LoRA included; a model
without a layer list is refused by name.

The layers' logprob and gradient test and one head test compile with inductor, as runs do; the
other tests use aot_eager, which captures the same graphs (forward, backward, guards) without
generating code, because a cold inductor compile costs 10-20 s a graph on 2 cores."""

from __future__ import annotations

import contextlib
import copy

import pytest
import torch
from torch._dynamo.utils import counters

from rlvr.algorithm.losses import LossParams, PolicyLoss
from rlvr.algorithm.packing import SequenceToPack, pack_sequences
from rlvr.learner import Learner, LearnerSettings
from rlvr.learner.compiling import compile_decoder_layers
from rlvr.learner.forward import compiled_head, forward_logprobs, token_logprobs
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
    # One graph served every layer and shape, one every chunk of logits.
    assert _compiled_graphs() - graphs == first


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
        assert compiled_head(model) is not None
    assert compiled_head(eager.policy) is None
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


def _tiny_gemma2() -> torch.nn.Module:
    """Gemma2 soft-caps its logits (a `LOGIT_RECIPES` step, in the model's dtype), built as
    test_logit_scaling.py builds its models: logits of order 1, so the cap bites."""
    from transformers import AutoModelForCausalLM, Gemma2Config

    config = Gemma2Config(vocab_size=96, hidden_size=32, intermediate_size=64,
                          num_hidden_layers=2, num_attention_heads=2, num_key_value_heads=1,
                          head_dim=16, initializer_range=0.2, final_logit_softcapping=2.0)
    with torch.random.fork_rng():
        torch.manual_seed(0)
        return AutoModelForCausalLM.from_config(config, attn_implementation="sdpa")


def _head_results(model, hidden_NH, targets_N, bf16: bool) -> dict[str, torch.Tensor]:
    """Logprobs and entropies of 11 tokens in chunks of 4 (the last one shorter, each rerun in
    the backward pass) at temperature 0.7, and the gradients of a weighted sum of the logprobs
    with respect to the hidden states and the head's weight; then the same without gradients
    (the reference's and the old logprobs' pass)."""
    model.zero_grad()
    hidden_NH = hidden_NH.clone().requires_grad_()
    with torch.autocast("cpu", dtype=torch.bfloat16, enabled=bf16):
        logp_N, entropy_N = token_logprobs(model, hidden_NH, targets_N, 0.7, with_entropy=True,
                                           chunk_tokens=4)
        with torch.no_grad():
            no_grad_N, no_grad_entropy_N = token_logprobs(model, hidden_NH, targets_N, 0.7,
                                                          with_entropy=True, chunk_tokens=4)
    (logp_N * torch.linspace(-1, 1, len(logp_N))).sum().backward()
    return {"logprobs": logp_N.detach(), "entropy": entropy_N, "hidden grad": hidden_NH.grad,
            "head grad": model.get_output_embeddings().weight.grad.clone(),
            "no-grad logprobs": no_grad_N, "no-grad entropy": no_grad_entropy_N}


def _check_compiled_head(eager, backend: str) -> None:
    """The compiled head against the eager one, float32 and bf16 autocast; its graphs run
    without the decoder, so every graph counted is the head's."""
    compiled = copy.deepcopy(eager)
    compile_decoder_layers(compiled, backend)
    assert compiled_head(eager) is None and compiled_head(compiled) is not None
    gen = torch.Generator().manual_seed(0)
    hidden_NH = 3 * torch.randn(11, eager.config.hidden_size, generator=gen)
    targets_N = torch.randint(0, eager.config.vocab_size, (11,), generator=gen)
    for bf16 in (False, True):
        graphs = _compiled_graphs()
        want = _head_results(eager, hidden_NH, targets_N, bf16)
        assert _compiled_graphs() == graphs  # the eager model compiles nothing
        got = _head_results(compiled, hidden_NH, targets_N, bf16)
        # One graph with gradients for chunks of 4 and 3 (shapes are dynamic), one without.
        assert _compiled_graphs() - graphs == 2
        # bf16: inductor rounds the soft-cap's steps as eager does (`compile_head`); without
        # that, logprobs were 5e-3 off.
        tolerance = dict(atol=1e-3, rtol=1e-3) if bf16 else dict(atol=1e-5, rtol=1e-5)
        for key, value in want.items():
            torch.testing.assert_close(got[key], value, **tolerance, msg=key)
        assert want["entropy"].min() > 0.1  # not a one-hot distribution: the test means something


@pytest.mark.parametrize("model_name", ["llama", "gemma2 soft-cap"])
def test_the_compiled_head_gives_eager_logprobs_entropy_and_gradients(tiny_model_dir,
                                                                      model_name):
    from rlvr.models import load_causal_lm

    eager = load_causal_lm(tiny_model_dir) if model_name == "llama" else _tiny_gemma2()
    _check_compiled_head(eager, "aot_eager")


def test_the_head_compiled_by_inductor_gives_eager_logprobs_entropy_and_gradients():
    _check_compiled_head(_tiny_gemma2(), "inductor")


def test_a_compiled_head_runs_a_batch_without_response_tokens(tiny_model_dir):
    from rlvr.models import load_causal_lm

    model = load_causal_lm(tiny_model_dir)
    compile_decoder_layers(model, "aot_eager")
    hidden = torch.zeros(0, model.config.hidden_size, requires_grad=True)
    logp_N, entropy_N = token_logprobs(model, hidden, torch.zeros(0, dtype=torch.long), 1.0,
                                       with_entropy=True)
    assert logp_N.shape == entropy_N.shape == (0,) and logp_N.grad_fn is not None
    logp_N.sum().backward()  # a sharded peer with rows must not wait on a missing gradient
    assert model.lm_head.weight.grad is not None


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
    from rlvr.run.settings import learner_settings

    cfg = load_config(None, ["model.compile=true"])
    assert learner_settings(cfg).compile_backend == "inductor"
    assert learner_settings(load_config(None, [])).compile_backend is None
