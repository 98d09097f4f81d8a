"""LoRA (rlvr.learner.lora): targets, the adapters' gradient against a hand computation, the
reference as the base with adapters off, merged weights for engines (the transformers engine
and vLLM then give the learner's logprobs), adapter-only training state, dropout."""

import pytest
import torch

from rlvr.config.schema import VllmOptions
from rlvr.algorithm.losses import LossInputs, LossParams, compute_policy_loss
from rlvr.algorithm.packing import SequenceToPack, pack_sequences
from rlvr.learner import Learner, LearnerSettings
from rlvr.learner.forward import forward_logprobs
from rlvr.learner.lora import (LoraSettings, LoraTargetError, adapter_scales, adapters_disabled,
                               decoder_linear_modules, engine_weights, merge_adapter_weights,
                               merged_layout, parameter_counts, resolve_targets, wrap_lora)
from rlvr.models import load_causal_lm
from rlvr.rollout.weight_sync import sync_weights

LAYER = "base_model.model.model.layers.1.self_attn.q_proj"  # the layer checked by hand
PROMPTS = [[1, 90, 91, 92, 2, 1, 70], [1, 80, 81, 2, 1, 70, 71, 72, 73]]


def _lora(model, rank=4, alpha=8.0, **kw):
    return wrap_lora(model, LoraSettings(rank=rank, alpha=alpha, **kw))


def _randomize_b(model, seed=0):
    """B starts at zero (the wrapped model is the base); tests want a visible adapter."""
    gen = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, p in model.named_parameters():
            if ".lora_B." in name:
                p.copy_(torch.randn(p.shape, generator=gen) * 0.1)


def _batch(n=6, pack_length=32):
    gen = torch.Generator().manual_seed(7)
    seqs = []
    for i in range(n):
        p, r = 4 + i % 3, 3 + (i * 5) % 6
        seqs.append(SequenceToPack(torch.randint(3, 250, (p,), generator=gen).tolist(),
                                   torch.randint(3, 250, (r,), generator=gen).tolist(),
                                   [-5.0] * r, advantage=(-1.0) ** i * (1 + i / 10), index=i))
    return pack_sequences(seqs, pack_length=pack_length)


def _settings(**kw):
    base = dict(learning_rate=1e-2, lr_scheduler_type="constant", warm_up_steps=0,
                total_optimizer_steps=10, max_grad_norm=1e9)
    return LearnerSettings(**{**base, **kw})


def _params(batch, beta=0.1):
    return LossParams(clip_lower=0.2, clip_higher=0.28, beta=beta, kl_estimator=2,
                      denominator=float(batch.num_response_tokens))


def _loss(batch, beta=0.1):
    return lambda inputs: compute_policy_loss("dapo", inputs, _params(batch, beta))


def test_default_targets_are_the_linear_layers_inside_decoder_layers(tiny_model):
    names = decoder_linear_modules(tiny_model)
    leaves = {n.rsplit(".", 1)[-1] for n in names}
    assert leaves == {"q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj",
                      "down_proj"}
    assert len(names) == 14 and not any("lm_head" in n or "embed" in n for n in names)
    assert resolve_targets(tiny_model, None) == names
    assert resolve_targets(tiny_model, ["self_attn.q_proj", "down_proj"]) == [
        n for n in names if n.endswith(("q_proj", "down_proj"))]


def test_a_target_matching_nothing_names_it_and_the_linear_layers_there_are(tiny_model):
    with pytest.raises(LoraTargetError) as error:
        resolve_targets(tiny_model, ["q_proj", "query_key_value", "lm_head"])
    message = str(error.value)
    assert "['query_key_value', 'lm_head']" in message and "model.lora.target_modules" in message
    assert "'gate_proj'" in message and "'q_proj'" in message


def test_wrapped_model_starts_as_the_base_and_trains_only_the_adapters(tiny_model_dir):
    base = load_causal_lm(tiny_model_dir)
    policy = _lora(load_causal_lm(tiny_model_dir), rank=4)
    ids = torch.tensor([PROMPTS[1]])
    torch.testing.assert_close(policy(input_ids=ids).logits, base(input_ids=ids).logits,
                               atol=0, rtol=0)  # B = 0
    trainable, total = parameter_counts(policy)
    # rank x (in + out) per adapted layer: q, o 64->64; k, v 64->32; gate, up 64->128; down
    # 128->64; two layers.
    per_layer = 4 * ((64 + 64) * 2 + (64 + 32) * 2 + (64 + 128) * 3)
    assert trainable == 2 * per_layer
    assert total == sum(p.numel() for p in base.parameters()) + trainable
    learner = Learner(policy, None, _settings(), reference_is_base=True)
    assert {id(p) for g in learner.optimizer.param_groups for p in g["params"]} == {
        id(p) for n, p in policy.named_parameters() if ".lora_" in n}


def test_adapter_gradients_match_the_hand_computation(tiny_model_dir):
    """One update with the KL penalty: the learner's gradients of one layer's A and B equal
    the chain rule through the merged weight W' = W + s B A, dL/dB = s G A^T and
    dL/dA = s B^T G, where G = dL/dW' is taken by autograd on a plain model holding W'; and
    the loss is the plain model's, with the base model as the reference."""
    batch = _batch()
    policy = _lora(load_causal_lm(tiny_model_dir))
    _randomize_b(policy)
    a = policy.get_submodule(LAYER).lora_A["default"].weight.detach().clone()  # [r, in]
    b = policy.get_submodule(LAYER).lora_B["default"].weight.detach().clone()  # [out, r]
    scale = adapter_scales(policy)[LAYER]
    assert scale == 2.0  # alpha 8 / rank 4
    plain = load_causal_lm(tiny_model_dir)
    plain.load_state_dict(dict(engine_weights(policy)))
    base = load_causal_lm(tiny_model_dir)

    learner = Learner(policy, None, _settings(), reference_is_base=True)
    grads = {}
    learner.optimizer.step = lambda: grads.update(
        {n: p.grad.clone() for n, p in policy.named_parameters() if p.grad is not None})
    result = learner.update(batch, _loss(batch), num_micro_batches=2, num_epochs=1,
                            temperature=1.0)

    plain.requires_grad_(False)
    merged_weight = plain.get_submodule(LAYER.removeprefix("base_model.model.")).weight
    merged_weight.requires_grad_(True)
    new_RL, _ = forward_logprobs(plain, batch, 1.0)
    with torch.no_grad():
        ref_RL, _ = forward_logprobs(base, batch, 1.0)
    out = compute_policy_loss("dapo", LossInputs(
        new_logprobs_RL=new_RL, old_logprobs_RL=new_RL.detach(),
        advantages_RL=batch.advantages_RL, response_mask_RL=batch.response_mask_RL,
        ref_logprobs_RL=ref_RL, sequence_ids_RL=batch.sequence_index_RL,
        engine_logprobs_RL=batch.engine_logprobs_RL), _params(batch))
    out.loss.backward()
    g = merged_weight.grad  # [out, in]
    assert float(g.abs().max()) > 1e-4  # a real gradient, not a vacuous match
    torch.testing.assert_close(grads[f"{LAYER}.lora_B.default.weight"], scale * g @ a.T,
                               atol=1e-6, rtol=1e-4)
    torch.testing.assert_close(grads[f"{LAYER}.lora_A.default.weight"], scale * b.T @ g,
                               atol=1e-6, rtol=1e-4)
    assert result.loss_sums.keys() == out.sums.keys()
    for key, value in out.sums.items():
        assert result.loss_sums[key] == pytest.approx(value, rel=1e-5, abs=1e-6), key
    assert out.sums["kl_loss_sum"] > 0  # the adapters moved the policy off its base


def test_reference_with_adapters_off_is_the_base_model(tiny_model_dir):
    batch = _batch()
    policy = _lora(load_causal_lm(tiny_model_dir))
    _randomize_b(policy)
    base_RL, _ = forward_logprobs(load_causal_lm(tiny_model_dir), batch, 0.7)
    with torch.no_grad():
        with adapters_disabled(policy):
            off_RL, _ = forward_logprobs(policy, batch, 0.7)
        on_RL, _ = forward_logprobs(policy, batch, 0.7)
    torch.testing.assert_close(off_RL, base_RL.detach(), atol=1e-6, rtol=0)
    assert float((on_RL - off_RL).abs().max()) > 1e-3
    # Adapters come back on, still trainable, after the reference pass.
    assert all(p.requires_grad for n, p in policy.named_parameters() if ".lora_" in n)


def test_merged_weights_are_w_plus_scaled_b_a_under_base_names(tiny_model_dir):
    base = load_causal_lm(tiny_model_dir)
    policy = _lora(load_causal_lm(tiny_model_dir), target_modules=("q_proj", "down_proj"))
    _randomize_b(policy)
    before = {n: t.clone() for n, t in policy.state_dict().items()}
    merged = dict(engine_weights(policy))
    assert list(merged) == list(base.state_dict())  # names and order of the base model
    for name, tensor in base.state_dict().items():
        if name.endswith(("q_proj.weight", "down_proj.weight")):
            layer = "base_model.model." + name.removesuffix(".weight")
            module = policy.get_submodule(layer)
            want = tensor + 2.0 * module.lora_B["default"].weight @ module.lora_A["default"].weight
            torch.testing.assert_close(merged[name], want, atol=1e-6, rtol=0)
            assert not torch.equal(merged[name], tensor)
        else:
            assert torch.equal(merged[name], tensor), name
    # Merged on the fly: the trained module is untouched.
    assert all(torch.equal(t, before[n]) for n, t in policy.state_dict().items())
    # The layout engines agree on before a broadcast is the stream's, in order.
    layout = [(n, tuple(t.shape), t.dtype) for n, t in policy.state_dict().items()]
    scales = adapter_scales(policy)
    streamed = merge_adapter_weights(policy.state_dict().items(), scales)
    assert merged_layout(layout, scales) == [(n, tuple(t.shape), t.dtype) for n, t in streamed]


def _engine_vs_learner(engine, policy, temperature=0.7):
    from rlvr.types import SamplingParams

    groups = engine.generate(PROMPTS, SamplingParams(n=3, temperature=temperature,
                                                     max_tokens=10, seed=1))
    seqs = [SequenceToPack(PROMPTS[i], c.token_ids_T, c.logprobs_T, 0.0, 10 * i + k)
            for i, g in enumerate(groups) for k, c in enumerate(g)]
    batch = pack_sequences(seqs, pack_length=128)
    with torch.no_grad():
        local_RL, _ = forward_logprobs(policy, batch, temperature)
    mask = batch.response_mask_RL
    return local_RL[mask], batch.engine_logprobs_RL[mask]


def _trained_lora_learner(tiny_model_dir):
    policy = _lora(load_causal_lm(tiny_model_dir))
    learner = Learner(policy, None, _settings(learning_rate=5e-2), reference_is_base=True)
    batch = _batch()
    for _ in range(2):
        learner.update(batch, _loss(batch), 1, 1, 1.0)
    assert all(float(p.abs().max()) > 0 for n, p in policy.named_parameters()
               if ".lora_B." in n)
    return learner


def test_after_sync_the_transformers_engine_gives_the_learners_logprobs(tiny_model_dir,
                                                                        tiny_tokenizer):
    from rlvr.rollout.transformers.engine import TransformersEngine

    learner = _trained_lora_learner(tiny_model_dir)
    engine = TransformersEngine(load_causal_lm(tiny_model_dir), tiny_tokenizer,
                                (tiny_tokenizer.eos_token_id,), tiny_tokenizer.pad_token_id)
    before, _ = _engine_vs_learner(engine, learner.policy)
    sync_weights(learner, engine, version=1)
    local, from_engine = _engine_vs_learner(engine, learner.policy)
    torch.testing.assert_close(from_engine, local, atol=1e-4, rtol=0)
    assert engine.version == 1


@pytest.mark.component  # vLLM in this process
def test_after_sync_vllm_gives_the_learners_logprobs(tiny_model_dir, tiny_tokenizer):
    from rlvr.rollout import create_engine
    from rlvr.rollout.base import EngineSettings
    from rlvr.rollout.vllm.engine import INSTALL_HINT, vllm_available

    if not vllm_available():
        pytest.skip(f"vLLM is not installed: {INSTALL_HINT}")
    learner = _trained_lora_learner(tiny_model_dir)
    # As tests/rollout/vllm/test_engine.py starts it: a small KV cache and context.
    engine = create_engine("vllm", tiny_model_dir,
                           EngineSettings(engine_options={"vllm": VllmOptions(
                               kv_cache_gb=0.05, max_model_len=256)}),
                           (tiny_tokenizer.eos_token_id,), tiny_tokenizer.pad_token_id)
    try:
        sync_weights(learner, engine, version=1)
        local, from_engine = _engine_vs_learner(engine, learner.policy)
    finally:
        engine.close()
    torch.testing.assert_close(from_engine, local, atol=1e-4, rtol=0)


def test_training_state_holds_the_adapters_and_resumes_exactly(tiny_model_dir):
    """Three updates straight, against two, a state saved, a fresh learner (base reloaded from
    the model directory) restored from it, and the third: the same result and weights."""
    batches = [_batch(n=6), _batch(n=5), _batch(n=4)]

    def learner():
        return Learner(_lora(load_causal_lm(tiny_model_dir)), None, _settings(),
                       reference_is_base=True)

    straight = learner()
    results = [straight.update(b, _loss(b), 2, 2, 1.0) for b in batches]
    first = learner()
    for b in batches[:2]:
        first.update(b, _loss(b), 2, 2, 1.0)
    state = first.training_state()
    assert state["reference"] is None
    assert set(state["policy"]) == {n for n, _ in first.policy.named_parameters()
                                    if ".lora_" in n}  # no frozen base, no tied lm_head
    resumed = learner()
    resumed.load_training_state(state)
    again = resumed.update(batches[2], _loss(batches[2]), 2, 2, 1.0)
    assert again.loss_sums == results[2].loss_sums and again.grad_norm == results[2].grad_norm
    for (name, want), (_, got) in zip(straight.named_weights(), resumed.named_weights()):
        assert torch.equal(got, want), name


def test_a_full_model_state_does_not_load_into_a_lora_learner(tiny_model_dir):
    full = Learner(load_causal_lm(tiny_model_dir), None, _settings())
    lora = Learner(_lora(load_causal_lm(tiny_model_dir)), None, _settings())
    with pytest.raises(ValueError, match="this LoRA policy trains 28"):
        lora.load_training_state(full.training_state())


def test_lora_dropout_is_kept_and_every_other_dropout_is_off(tiny_model_dir):
    from transformers import AutoConfig, AutoModelForCausalLM

    config = AutoConfig.from_pretrained(tiny_model_dir, attention_dropout=0.1)
    model = AutoModelForCausalLM.from_pretrained(tiny_model_dir, config=config)
    policy = _lora(model, dropout=0.25)
    Learner(policy, None, _settings())
    rates = {n: m.p for n, m in policy.named_modules() if isinstance(m, torch.nn.Dropout)}
    assert rates and set(rates.values()) == {0.25}
    assert all(".lora_dropout." in n for n in rates)
    assert all(m.attention_dropout == 0.0 for n, m in policy.named_modules()
               if hasattr(m, "attention_dropout"))


def test_gradient_checkpointing_trains_the_adapters(tiny_model_dir):
    """The base's embeddings are frozen, so checkpointed layers get inputs without grad:
    transformers' non-reentrant checkpointing still reaches the adapters."""
    batch = _batch()
    grads = []
    for checkpointing in (False, True):
        policy = _lora(load_causal_lm(tiny_model_dir))
        _randomize_b(policy)
        learner = Learner(policy, None, _settings(gradient_checkpointing=checkpointing))
        learner.optimizer.step = lambda: grads.append(
            [p.grad.clone() for p in learner.trainable])
        learner.update(batch, _loss(batch, beta=0.0), 1, 1, 1.0)
    for plain, checkpointed in zip(*grads):
        torch.testing.assert_close(checkpointed, plain, atol=1e-6, rtol=1e-5)


def test_the_sharded_state_format_resumes_a_lora_learner(tiny_model_dir, tmp_path):
    """`checkpoint.state_format=sharded` (torch.distributed.checkpoint, here in one process)
    writes the whole policy, base included, and restores the adapters and Adam state."""
    batch = _batch()

    def learner():
        return Learner(_lora(load_causal_lm(tiny_model_dir)), None, _settings(),
                       reference_is_base=True)

    first = learner()
    first.update(batch, _loss(batch), 1, 1, 1.0)
    first.save_sharded_state(tmp_path / "state", {"step": 1})
    resumed = learner()
    assert resumed.load_sharded_state(tmp_path / "state") == {"step": 1}
    want, got = first.update(batch, _loss(batch), 1, 1, 1.0), resumed.update(batch, _loss(batch),
                                                                              1, 1, 1.0)
    assert got.loss_sums == want.loss_sums and got.grad_norm == want.grad_norm
