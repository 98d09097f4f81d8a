"""Architectures that change their logits inside `forward` (a scale, a soft-cap, a hidden-state
divisor) give the learner the logprobs `log_softmax(model(...).logits / T)`
would, and `check_logit_path` refuses a model whose own forward the learner does not reproduce.

The models are built from tiny configs (hidden size 32, 2 layers, 96 tokens); nothing is
downloaded. Their initializer range is 0.2 rather than the usual 0.02 so that logits are of
order 1: a missing rescaling or soft-cap then moves logprobs by far more than the 1e-5 tolerance.
"""

from __future__ import annotations

import pytest
import torch
from transformers import AutoModelForCausalLM, LlamaConfig, LlamaForCausalLM
from transformers.models.auto.configuration_auto import CONFIG_MAPPING

from rlvr.algorithm.packing import SequenceToPack, pack_sequences
from rlvr.learner.forward import check_logit_path, forward_logprobs

VOCAB = 96
COMMON = dict(vocab_size=VOCAB, hidden_size=32, intermediate_size=64, num_hidden_layers=2,
              num_attention_heads=2, num_key_value_heads=1, head_dim=16, initializer_range=0.2,
              max_position_embeddings=128, pad_token_id=0, bos_token_id=1, eos_token_id=2)
# Sliding windows keep their defaults (512 and up), longer than any sequence here: the packed
# 4-D mask does not apply them, which is a separate matter from the logits tested here.
# Per-layer-input embeddings (Gemma3n/4) default to a 262k vocabulary: cut to ours.
GEMMA_PER_LAYER = dict(vocab_size_per_layer_input=VOCAB, hidden_size_per_layer_input=8)
MOE = dict(num_local_experts=2, num_experts_per_tok=1)

# model_type -> config overrides that make its forward change the logits.
PACKABLE = {
    "cohere": dict(logit_scale=4.0),
    "cohere2": dict(logit_scale=4.0),
    "cohere2_moe": dict(logit_scale=4.0),
    "granite": dict(logits_scaling=8.0),
    "granitemoe": dict(logits_scaling=8.0, **MOE),
    "granitemoeshared": dict(logits_scaling=8.0, shared_intermediate_size=32, **MOE),
    "hyperclovax": dict(logits_scaling=0.25),  # multiplies, where Granite divides
    # Divides hidden states by hidden_size / dim_model_base = 4; MLA wants as many KV heads
    # as query heads.
    "minicpm3": dict(dim_model_base=8, kv_lora_rank=16, q_lora_rank=16, qk_nope_head_dim=8,
                     qk_rope_head_dim=8, v_head_dim=16, num_key_value_heads=2, head_dim=None),
    "gemma2": dict(final_logit_softcapping=2.0),
    "gemma3_text": dict(final_logit_softcapping=2.0),
    "gemma3n_text": dict(final_logit_softcapping=2.0, num_kv_shared_layers=0, laurel_rank=4,
                         altup_num_inputs=2, activation_sparsity_pattern=[0.0, 0.0],
                         layer_types=["sliding_attention", "full_attention"], **GEMMA_PER_LAYER),
    "gemma4_text": dict(final_logit_softcapping=2.0, **GEMMA_PER_LAYER),
    "gemma4_unified_text": dict(final_logit_softcapping=2.0, **GEMMA_PER_LAYER),
    "vaultgemma": dict(final_logit_softcapping=2.0),
    "nanochat": dict(final_logit_softcapping=2.0),
}
# Recurrent (SSM, RG-LRU) layers carry state across a packed row, whatever the attention mask
# says, so these are checked one sequence per row.
RECURRENT = {
    "falcon_h1": dict(lm_head_multiplier=3.0, mamba_d_ssm=32, mamba_n_heads=4, mamba_d_head=8,
                      mamba_d_state=8, mamba_chunk_size=16),
    "granitemoehybrid": dict(logits_scaling=8.0, shared_intermediate_size=32,
                             layer_types=["mamba", "attention"], mamba_n_heads=4,
                             mamba_d_head=16, mamba_d_state=8, mamba_n_groups=1,
                             mamba_chunk_size=16, **MOE),
    # One recurrent and one attention layer: the default pattern cut to 2 layers has no
    # attention layer, which transformers 5.17's forward cannot run ("'attention' is not in list").
    "recurrent_gemma": dict(logits_soft_cap=2.0, lru_width=32, attention_window_size=64,
                            head_dim=None, max_position_embeddings=None,
                            block_types=["recurrent", "attention"]),
}


def _tiny(model_type: str, overrides: dict) -> torch.nn.Module:
    """The class `AutoModelForCausalLM` picks for `model_type`, as `load_causal_lm` would load
    it (sdpa attention), from a tiny config; an override of None drops that setting."""
    settings = {k: v for k, v in {**COMMON, **overrides}.items() if v is not None}
    return _seeded(CONFIG_MAPPING[model_type](**settings))


def _composite(model_type: str, text_overrides: dict, **extra) -> torch.nn.Module:
    """A multimodal model (text config nested) that `AutoModelForCausalLM` also loads."""
    return _seeded(CONFIG_MAPPING[model_type](text_config={**COMMON, **text_overrides}, **extra))


def _seeded(config) -> torch.nn.Module:
    with torch.random.fork_rng():
        torch.manual_seed(0)
        return AutoModelForCausalLM.from_config(config, attn_implementation="sdpa").eval()


COMPOSITE = {
    # Gemma4's multimodal forward soft-caps with its text config's cap...
    "gemma4": lambda: _composite("gemma4", dict(final_logit_softcapping=2.0, **GEMMA_PER_LAYER),
                                 vision_config=dict(hidden_size=16, num_hidden_layers=1,
                                                    num_attention_heads=1, intermediate_size=16),
                                 audio_config=None),
    "gemma4_unified": lambda: _composite("gemma4_unified",
                                         dict(final_logit_softcapping=2.0, **GEMMA_PER_LAYER)),
    # ...Gemma3's does not, though its text config holds one: the learner must not cap either.
    "gemma3": lambda: _composite("gemma3", dict(final_logit_softcapping=2.0),
                                 vision_config=dict(hidden_size=16, num_hidden_layers=1,
                                                    num_attention_heads=1, intermediate_size=16,
                                                    image_size=14, patch_size=7),
                                 mm_tokens_per_image=4, image_token_id=95, boi_token_id=93,
                                 eoi_token_id=94),
}

ALL_MODELS = {**{t: (lambda t=t: _tiny(t, PACKABLE[t])) for t in PACKABLE},
              **{t: (lambda t=t: _tiny(t, RECURRENT[t])) for t in RECURRENT}, **COMPOSITE}


def _sequences(shared_prompt: bool) -> list[SequenceToPack]:
    gen = torch.Generator().manual_seed(0)
    shared = torch.randint(3, 90, (6,), generator=gen).tolist()
    seqs = []
    for i, (p, r) in enumerate([(5, 7), (9, 3), (4, 11), (6, 6)]):
        prompt = shared if shared_prompt else torch.randint(3, 90, (p,), generator=gen).tolist()
        response = torch.randint(3, 90, (r,), generator=gen).tolist()
        seqs.append(SequenceToPack(prompt, response, [0.0] * r, advantage=1.0, index=i))
    return seqs


def _own_logprobs(model, seq: SequenceToPack, temperature: float) -> torch.Tensor:
    """The model's own forward on one sequence: logprobs of its response tokens."""
    ids_1T = torch.tensor([seq.prompt_ids + seq.response_ids])
    logits_TV = model(input_ids=ids_1T).logits[0, :-1].float() / temperature
    logp_T = torch.log_softmax(logits_TV, -1).gather(-1, ids_1T[0, 1:, None]).squeeze(-1)
    return logp_T[len(seq.prompt_ids) - 1:]


def _assert_learner_matches_forward(model, seqs, pack_length, temperature):
    batch = pack_sequences(seqs, pack_length=pack_length)
    with torch.no_grad():
        packed_RL, _ = forward_logprobs(model, batch, temperature=temperature)
        for s in seqs:
            got = packed_RL[(batch.sequence_index_RL == s.index) & batch.response_mask_RL]
            want = _own_logprobs(model, s, temperature)
            torch.testing.assert_close(got, want, atol=1e-5, rtol=1e-5)


@pytest.mark.parametrize("temperature", [1.0, 0.7])
@pytest.mark.parametrize("model_type", [*PACKABLE, *COMPOSITE])
def test_packed_logprobs_match_the_models_own_forward(model_type, temperature):
    """Unrelated sequences packed several to a row, then a group of responses sharing one
    prompt packed once."""
    model = ALL_MODELS[model_type]()
    _assert_learner_matches_forward(model, _sequences(shared_prompt=False), 32, temperature)
    _assert_learner_matches_forward(model, _sequences(shared_prompt=True), 64, temperature)


@pytest.mark.parametrize("temperature", [1.0, 0.7])
@pytest.mark.parametrize("model_type", list(RECURRENT))
def test_recurrent_models_match_one_sequence_per_row(model_type, temperature):
    seqs = _sequences(shared_prompt=False)  # 12 to 15 tokens each: a 15-token row holds one
    model = ALL_MODELS[model_type]()
    _assert_learner_matches_forward(model, seqs, 15, temperature)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("model_type", [*PACKABLE, *COMPOSITE])
def test_guard_accepts_what_the_learner_reproduces(model_type, dtype):
    model = ALL_MODELS[model_type]().to(dtype).train()
    check_logit_path(model)
    assert model.training  # the probe ran in eval mode and put the mode back


@pytest.mark.parametrize("model_type", list(RECURRENT))
def test_guard_refuses_recurrent_models_for_packing(model_type):
    with pytest.raises(ValueError, match="cannot be trained on packed rows"):
        check_logit_path(ALL_MODELS[model_type]())


class TripledLogitsLlama(LlamaForCausalLM):
    """An architecture rlvr does not know, whose forward multiplies its logits by 3."""

    def forward(self, *args, **kwargs):
        out = super().forward(*args, **kwargs)
        out.logits = out.logits * 3
        return out


class SoftCappedLlama(LlamaForCausalLM):
    """Soft-caps its logits at 1, with nothing in its config to say so."""

    def forward(self, *args, **kwargs):
        out = super().forward(*args, **kwargs)
        out.logits = torch.tanh(out.logits)
        return out


def _llama(cls=LlamaForCausalLM, attention="sdpa", **overrides):
    with torch.random.fork_rng():
        torch.manual_seed(0)
        return cls._from_config(LlamaConfig(**COMMON, **overrides), attn_implementation=attention)


def test_guard_accepts_a_plain_llama():
    check_logit_path(_llama())


def test_guard_names_an_unknown_rescaling():
    with pytest.raises(ValueError, match=r"TripledLogitsLlama \(model_type 'llama'\).*"
                                         r"logits are 3 times the learner's.*temperature 3\b"):
        check_logit_path(_llama(TripledLogitsLlama))


def test_guard_refuses_an_unknown_soft_cap():
    with pytest.raises(ValueError, match="SoftCappedLlama.*not a rescaling"):
        check_logit_path(_llama(SoftCappedLlama))


def test_guard_refuses_an_unknown_architecture_with_a_logit_setting():
    # Remote-code MiniCPM divides hidden states by hidden_size / dim_model_base; a model type
    # missing from the table that carries such a setting is refused before any probing.
    with pytest.raises(ValueError, match=r"not in LOGIT_RECIPES.*'dim_model_base': 8"):
        check_logit_path(_llama(dim_model_base=8))


def test_guard_refuses_attention_that_ignores_the_packed_mask():
    # Eager attention adds its mask to the scores: the learner gives it an additive mask
    # (`packed_additive_mask`). A model whose attention the learner has no mask for is refused.
    check_logit_path(_llama(attention="eager"))
    model = _llama(attention="eager")
    model.config._attn_implementation = "paged|eager"
    with pytest.raises(ValueError, match="cannot be trained on packed rows"):
        check_logit_path(model)


def test_guard_names_an_architecture_the_learner_cannot_run():
    # ModernBERT-decoder's head is a transform plus a `decoder` Linear, which `get_decoder()`
    # returns: the learner's path breaks, and the guard says which model it broke on.
    model = _tiny("modernbert-decoder", dict(num_key_value_heads=None, head_dim=None))
    with pytest.raises(ValueError, match="ModernBertDecoderForCausalLM.*learner's path"):
        check_logit_path(model)
