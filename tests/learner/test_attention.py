"""Each attention implementation confines packed sequences as sdpa's dense mask does: the
masks themselves, and forward passes, gradients and checks through each implementation."""

from types import SimpleNamespace

import pytest
import torch

from rlvr.algorithm.packing import SequenceToPack, pack_sequences
from rlvr.device import HOST
from rlvr.learner.attention import packed_attention_mask
from rlvr.learner.forward import forward_logprobs


def test_attention_mask_confines_responses_to_their_prompt():
    # One row: prompt (segment 0, 2 tokens), response A (segment 1, 2 tokens) and response B
    # (segment 2, 1 token) both with parent 0, then one padding slot.
    segment = torch.tensor([[0, 0, 1, 1, 2, -1]])
    parent = torch.tensor([[-1, -1, 0, 0, 0, -1]])
    mask = packed_attention_mask(segment, parent)[0, 0]
    expected = torch.tensor([
        [1, 0, 0, 0, 0, 0],
        [1, 1, 0, 0, 0, 0],
        [1, 1, 1, 0, 0, 0],
        [1, 1, 1, 1, 0, 0],
        [1, 1, 0, 0, 1, 0],  # B sees the prompt and itself, not A
        [0, 0, 0, 0, 0, 1],  # padding attends only to itself
    ], dtype=torch.bool)
    assert torch.equal(mask, expected)


def test_a_sliding_window_shorter_than_a_sequence_is_refused():
    # The packed mask has no window; beyond the window the learner would see keys the model's
    # own forward hides (0.78 nats off on a tiny Gemma2 with a window of 4).
    from transformers import Gemma2Config, Gemma2ForCausalLM, LlamaConfig, LlamaForCausalLM

    from rlvr.learner.attention import check_attention_window

    gemma = Gemma2ForCausalLM(Gemma2Config(vocab_size=64, hidden_size=16, intermediate_size=32,
                                           num_hidden_layers=2, num_attention_heads=2,
                                           num_key_value_heads=1, head_dim=8, sliding_window=4))
    check_attention_window(gemma, 4)  # every sequence fits in the window
    with pytest.raises(ValueError, match="sliding window of 4 tokens"):
        check_attention_window(gemma, 5)
    llama = LlamaForCausalLM(LlamaConfig(vocab_size=64, hidden_size=16, intermediate_size=32,
                                         num_hidden_layers=1, num_attention_heads=2))
    check_attention_window(llama, 10_000)  # no window


# --- Attention implementations: eager (additive mask), flex (block mask) and flash (varlen)
# against sdpa (dense boolean mask).

def _shared_prompt_batch():
    """Two rows: a group of four responses after one shared prompt, then a second prompt's
    single response in a padded row."""
    gen = torch.Generator().manual_seed(1)
    prompt = torch.randint(3, 250, (9,), generator=gen).tolist()
    seqs = [SequenceToPack(prompt, torch.randint(3, 250, (n,), generator=gen).tolist(),
                           [0.0] * n, advantage=1.0, index=i) for i, n in enumerate([5, 1, 7, 3])]
    seqs.append(SequenceToPack([4, 5, 6], [7, 8], [0.0, 0.0], advantage=-1.0, index=4))
    batch = pack_sequences(seqs, pack_length=28)
    assert batch.seq_lens_per_row == [[25], [5]]  # the second row is padded to 25
    return batch


@pytest.fixture(scope="module")
def flex_model(tiny_model_dir):
    from rlvr.models import load_causal_lm

    return load_causal_lm(tiny_model_dir, attn_implementation="flex")


@pytest.fixture(scope="module")
def eager_model(tiny_model_dir):
    from rlvr.models import load_causal_lm

    return load_causal_lm(tiny_model_dir, attn_implementation="eager")


def test_eager_logprobs_and_gradients_equal_sdpa(tiny_model, eager_model):
    """Eager attention adds its mask to the scores: given the additive mask it confines shared
    prompts, siblings and padding as sdpa's boolean mask does, with the same logprobs, entropy
    and gradients (a boolean mask would be added as 0/1 and confine nothing)."""
    batch = _shared_prompt_batch()
    results = []
    for model in (tiny_model, eager_model):
        model.zero_grad()
        logprobs_RL, entropy_RL = forward_logprobs(model, batch, 0.7, with_entropy=True)
        (logprobs_RL * batch.advantages_RL)[batch.response_mask_RL].sum().backward()
        grads = {name: p.grad.clone() for name, p in model.named_parameters()}
        results.append((logprobs_RL.detach(), entropy_RL, grads))
        model.zero_grad()
    (dense_RL, dense_entropy_RL, dense), (eager_RL, eager_entropy_RL, eager) = results
    torch.testing.assert_close(eager_RL, dense_RL, atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(eager_entropy_RL, dense_entropy_RL, atol=1e-5, rtol=1e-5)
    for name in dense:
        assert torch.isfinite(eager[name]).all(), name
        torch.testing.assert_close(eager[name], dense[name], atol=1e-5, rtol=1e-4, msg=name)


def test_eager_under_bf16_autocast_stays_near_float32(tiny_model, eager_model):
    """How the learner runs it on a bf16 CPU or GPU: matmuls in bf16, the masked scores and
    softmax in float32 (the additive mask is float32). Its logprobs are as close to float32's
    as sdpa's under the same autocast."""
    batch = _shared_prompt_batch()
    with torch.no_grad():
        exact_RL, _ = forward_logprobs(tiny_model, batch, 1.0)
        gaps = []
        for model in (tiny_model, eager_model):
            with torch.autocast("cpu", dtype=torch.bfloat16):
                half_RL, _ = forward_logprobs(model, batch, 1.0)
            gaps.append(float((half_RL - exact_RL)[batch.response_mask_RL].abs().max()))
    sdpa_gap, eager_gap = gaps
    assert eager_gap < max(2 * sdpa_gap, 0.05), gaps


def test_additive_mask_is_the_boolean_mask():
    from rlvr.learner.attention import packed_additive_mask

    segment = torch.tensor([[0, 0, 1, 1, 2, -1], [0, 0, 0, 1, -1, -1]])
    parent = torch.tensor([[-1, -1, 0, 0, 0, -1], [-1, -1, -1, 0, -1, -1]])
    additive = packed_additive_mask(segment, parent)
    allowed = packed_attention_mask(segment, parent)
    assert additive.dtype == torch.float32 and additive.shape == allowed.shape
    assert torch.equal(additive == 0, allowed)
    assert (additive[~allowed] == torch.finfo(torch.float32).min).all()


def test_eager_model_passes_the_logit_path_check(eager_model):
    from rlvr.learner.forward import check_logit_path

    check_logit_path(eager_model)


def test_flex_logprobs_equal_sdpa_with_shared_prompts(tiny_model, flex_model):
    # The compiled flex kernel (forward only on CPU), on two batch shapes: the second ([3, 12]
    # after [2, 25]) recompiles it for dynamic shapes, which failed with C++ errors while the
    # mask_mod loaded three values (`packed_block_mask`). Each compilation takes 5-20 s.
    seqs = [SequenceToPack([4, 5, 6], [7, 8], [0.0] * 2, 1.0, 0),
            SequenceToPack([4, 5, 6], [9], [0.0], 1.0, 1),
            SequenceToPack([1, 2, 3, 4, 5, 6, 7, 8, 9, 10], [11, 12], [0.0] * 2, 1.0, 2),
            SequenceToPack([3, 2, 1, 4, 5, 6, 7, 8, 9], [10, 11], [0.0] * 2, 1.0, 3)]
    for batch in (_shared_prompt_batch(), pack_sequences(seqs, pack_length=12)):
        with torch.no_grad():
            dense_RL, dense_entropy_RL = forward_logprobs(tiny_model, batch, 0.7,
                                                          with_entropy=True)
            flex_RL, flex_entropy_RL = forward_logprobs(flex_model, batch, 0.7,
                                                        with_entropy=True)
        torch.testing.assert_close(flex_RL, dense_RL, atol=1e-5, rtol=1e-5)
        torch.testing.assert_close(flex_entropy_RL, dense_entropy_RL, atol=1e-5, rtol=1e-5)


@pytest.fixture
def reference_flex(monkeypatch):
    """torch's unfused reference implementation of flex attention in place of the compiled
    kernel transformers calls: no compilation (seconds per new shape), and it differentiates
    on CPU once torch's guard is lifted (torch 2.13 has no CPU flex backward,
    `check_attention_backward`). It runs the same block mask, which is what rlvr owns."""
    import torch.nn.attention.flex_attention as torch_flex
    import transformers.integrations.flex_attention as hf_flex

    monkeypatch.setattr(torch_flex, "_validate_device", lambda query, key, value: None)
    monkeypatch.setattr(hf_flex, "compile_friendly_flex_attention",
                        lambda query, key, value, training=False, **kwargs:
                        torch_flex.flex_attention(query, key, value, **kwargs))


@pytest.mark.filterwarnings("ignore:flex_attention called without torch.compile")
def test_flex_gradients_equal_sdpa(tiny_model, flex_model, reference_flex):
    # The mask (padding that sees nothing included) gives sdpa's gradients; the fused
    # kernel's own backward is torch's business, run on GPUs.
    batch = _shared_prompt_batch()
    grads = []
    for model in (tiny_model, flex_model):
        model.zero_grad()
        logprobs_RL, _ = forward_logprobs(model, batch, temperature=1.0)
        (logprobs_RL * batch.advantages_RL)[batch.response_mask_RL].sum().backward()
        grads.append({name: p.grad.clone() for name, p in model.named_parameters()})
        model.zero_grad()
    dense, flex = grads
    for name in dense:
        torch.testing.assert_close(flex[name], dense[name], atol=1e-5, rtol=1e-4, msg=name)


def test_block_mask_matches_dense_mask_except_padding():
    from rlvr.learner.attention import packed_block_mask

    segment = torch.tensor([[0, 0, 1, 1, 2, -1], [0, 0, 0, 1, -1, -1]])
    parent = torch.tensor([[-1, -1, 0, 0, 0, -1], [-1, -1, -1, 0, -1, -1]])
    block_mask = packed_block_mask(segment, parent)
    # The block level (128-token blocks) only says where to look; the tokens' is the mask_mod.
    rows, q, k = torch.meshgrid(torch.arange(2), torch.arange(6), torch.arange(6), indexing="ij")
    token_RLL = block_mask.mask_mod(rows, torch.zeros_like(rows), q, k)
    dense_RLL = packed_attention_mask(segment, parent)[:, 0]
    real_RL = segment >= 0
    assert torch.equal(token_RLL[real_RL], dense_RLL[real_RL])  # real queries: identical
    assert not token_RLL[~real_RL].any()  # padding sees nothing (sdpa's would see itself)


def test_flex_cannot_train_on_this_cpu(tiny_model, flex_model):
    from rlvr.learner.attention import check_attention_backward

    check_attention_backward(tiny_model, HOST)  # sdpa differentiates anywhere
    with pytest.raises(ValueError, match="cannot train on cpu"):
        check_attention_backward(flex_model, HOST)


@pytest.mark.filterwarnings("ignore:flex_attention called without torch.compile")
def test_flex_model_passes_the_logit_path_check(flex_model, reference_flex):
    from rlvr.learner.forward import check_logit_path

    check_logit_path(flex_model)


def _fake_model(attn_implementation: str):
    """What the checks read of a model; flash-attn cannot be loaded without CUDA."""
    return SimpleNamespace(config=SimpleNamespace(_attn_implementation=attn_implementation))


def test_flash_is_refused_when_prompts_are_shared():
    from rlvr.learner.attention import check_packed_attention

    flash = _fake_model("flash_attention_2")
    with pytest.raises(ValueError, match="shares each group's prompt"):
        check_packed_attention(flash, share_prompts=True)
    check_packed_attention(flash, share_prompts=False)
    check_packed_attention(_fake_model("flex_attention"), share_prompts=True)
    check_packed_attention(_fake_model("eager"), share_prompts=True)
    with pytest.raises(ValueError, match="cannot be trained on packed rows"):
        check_packed_attention(_fake_model("paged|eager"), share_prompts=False)


def test_flash_inputs_give_transformers_one_sequence_per_unit():
    """The varlen path gets no mask: transformers cuts the flattened rows where position ids
    restart (`prepare_fa_kwargs_from_position_ids`, pure torch, so it runs here). Without shared
    prompts each unit (a prompt and its one response) must come out as one sequence."""
    from transformers.modeling_flash_attention_utils import prepare_fa_kwargs_from_position_ids

    from rlvr.learner.attention import PACKED_ATTENTION

    varlen_inputs = PACKED_ATTENTION["flash_attention_2"].decoder_inputs
    seqs = [SequenceToPack([4, 5, 6], [7, 8], [0.0] * 2, 1.0, 0),
            SequenceToPack([4, 5, 6], [9], [0.0], 1.0, 1),
            SequenceToPack([1, 2, 3, 4, 5], [7, 8, 9], [0.0] * 3, 1.0, 2)]
    batch = pack_sequences(seqs, pack_length=10, share_prompts=False)
    assert batch.seq_lens_per_row == [[5, 4], [8]]  # two rows of 9 columns, one padding slot
    inputs = varlen_inputs(batch)
    assert "attention_mask" not in inputs and inputs["input_ids"].shape == (1, 18)
    (cu_seqlens, _), _ = prepare_fa_kwargs_from_position_ids(inputs["position_ids"])
    # Units at 0-5, 5-9 and 9-17; the padding slot at 17 is a sequence of its own.
    assert cu_seqlens.tolist() == [0, 5, 9, 17, 18]
    with pytest.raises(ValueError, match="share a prompt"):
        varlen_inputs(pack_sequences(seqs, pack_length=10, share_prompts=True))


def test_load_causal_lm_names_the_implementations(tiny_model_dir, tiny_model, flex_model,
                                                  eager_model):
    from rlvr.models import load_causal_lm

    assert tiny_model.config._attn_implementation == "sdpa"  # the default
    assert flex_model.config._attn_implementation == "flex_attention"
    assert eager_model.config._attn_implementation == "eager"
    with pytest.raises(ValueError, match="not one of"):
        load_causal_lm(tiny_model_dir, attn_implementation="flash_attention_3")


@pytest.mark.filterwarnings("ignore:flex_attention called without torch.compile")
def test_no_tensor_is_created_on_an_implicit_device(tiny_model, flex_model, eager_model,
                                                    reference_flex):
    """With the default device set to meta, a tensor created without `device=` lands on meta
    and the forward fails (it did: `torch.ones(L, L)` of the dense mask). The batch and model
    are on the host; sdpa and eager run forward and backward, flex its forward (block mask included;
    the reference kernel, as compiling one under meta takes 30 s cold), flash the part that
    runs without CUDA: its inputs."""
    from rlvr.algorithm.sequences import sequence_lengths_per_token, sequence_mean_per_token
    from rlvr.learner.attention import PACKED_ATTENTION

    batch = _shared_prompt_batch()
    unshared = pack_sequences([SequenceToPack([4, 5], [6], [0.0], 1.0, 0),
                               SequenceToPack([4, 5], [7], [0.0], 1.0, 1)], 8,
                              share_prompts=False)
    default = torch.get_default_device()
    torch.set_default_device("meta")
    try:
        logprobs_RL, entropy_RL = forward_logprobs(tiny_model, batch, 1.0, with_entropy=True)
        logprobs_RL.sum().backward()
        eager_RL, _ = forward_logprobs(eager_model, batch, 1.0)
        eager_RL.sum().backward()
        with torch.no_grad():
            flex_RL, _ = forward_logprobs(flex_model, batch, 1.0)
        lengths_RL = sequence_lengths_per_token(batch.sequence_index_RL, batch.response_mask_RL)
        means_RL = sequence_mean_per_token(logprobs_RL, batch.sequence_index_RL,
                                           batch.response_mask_RL)
        varlen = PACKED_ATTENTION["flash_attention_2"].decoder_inputs(unshared)
    finally:
        torch.set_default_device(default)
        tiny_model.zero_grad()
        eager_model.zero_grad()
    for tensor in (logprobs_RL, entropy_RL, eager_RL, flex_RL, lengths_RL, means_RL,
                   *varlen.values()):
        assert tensor.device == HOST
