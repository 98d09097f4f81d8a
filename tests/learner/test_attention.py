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


def test_sequence_inputs_drop_padding_and_give_cumulative_lengths():
    """The varlen implementations (rlvr's varlen, flash_attention_2) get the rows' tokens as one
    stream without padding and each sequence's bounds: what transformers itself would read off
    the position ids (`prepare_fa_kwargs_from_position_ids`), computed on the host."""
    from transformers.modeling_flash_attention_utils import prepare_fa_kwargs_from_position_ids

    from rlvr.learner.attention import PACKED_ATTENTION, VARLEN, sequence_inputs

    assert PACKED_ATTENTION["flash_attention_2"].decoder_inputs is sequence_inputs
    assert PACKED_ATTENTION[VARLEN].decoder_inputs is sequence_inputs
    seqs = [SequenceToPack([4, 5, 6], [7, 8], [0.0] * 2, 1.0, 0),
            SequenceToPack([4, 5, 6], [9], [0.0], 1.0, 1),
            SequenceToPack([1, 2, 3, 4, 5], [7, 8, 9], [0.0] * 3, 1.0, 2)]
    batch = pack_sequences(seqs, pack_length=10, share_prompts=False)
    assert batch.seq_lens_per_row == [[5, 4], [8]]  # two rows of 9 columns, one padding slot
    inputs = sequence_inputs(batch)
    kwargs = inputs.kwargs
    assert "attention_mask" not in kwargs
    assert kwargs["input_ids"].tolist() == [[4, 5, 6, 7, 8, 4, 5, 6, 9, 1, 2, 3, 4, 5, 7, 8, 9]]
    assert kwargs["cu_seq_lens_q"].tolist() == [0, 5, 9, 17]
    assert kwargs["cu_seq_lens_q"].dtype == torch.int32 and kwargs["max_length_q"] == 8
    assert inputs.token_index_T.tolist() == [*range(9), *range(9, 17)]  # row 1 from column 0
    (cu_seqlens, _), (longest, _) = prepare_fa_kwargs_from_position_ids(kwargs["position_ids"])
    assert cu_seqlens.tolist() == [0, 5, 9, 17] and int(longest) == 8
    # Outputs go back to their rows, zeros where padding was.
    rows_RLX = inputs.to_rows(kwargs["input_ids"][..., None].float(), 2, 9)
    assert rows_RLX[..., 0].tolist() == [[4, 5, 6, 7, 8, 4, 5, 6, 9], [1, 2, 3, 4, 5, 7, 8, 9, 0]]
    with pytest.raises(ValueError, match="share a prompt"):
        sequence_inputs(pack_sequences(seqs, pack_length=10, share_prompts=True))


def test_sequence_inputs_of_empty_rows_run_one_padding_slot():
    # A rank kept in step by an empty row still runs the decoder (its peers expect it).
    from rlvr.learner.attention import sequence_inputs

    batch = pack_sequences([SequenceToPack([4, 5], [6], [0.0], 1.0, 0)], 8,
                           share_prompts=False)
    empty = batch.select_rows([0])
    empty.seq_lens_per_row = [[]]
    kwargs = sequence_inputs(empty).kwargs
    assert kwargs["input_ids"].shape == (1, 1) and kwargs["cu_seq_lens_q"].tolist() == [0, 1]


def _grouped_sequences():
    """Three groups of three responses sharing their group's prompt, responses of 2 to 5
    tokens, advantages of both signs."""
    gen = torch.Generator().manual_seed(1)
    seqs = []
    for group in range(3):
        prompt = torch.randint(3, 250, (5 + 2 * group,), generator=gen).tolist()
        for k in range(3):
            n = 2 + (group + k) % 4
            seqs.append(SequenceToPack(prompt, torch.randint(3, 250, (n,), generator=gen).tolist(),
                                       [0.0] * n, advantage=(-1.0) ** k * (k + 1), index=len(seqs)))
    return seqs


def _per_sequence_results(model, batch, num_sequences):
    """Each sequence's response logprobs and entropies (in token order), and every weight's
    gradient of an advantage-weighted logprob sum."""
    model.zero_grad()
    logprobs_RL, entropy_RL = forward_logprobs(model, batch, 0.7, with_entropy=True)
    (logprobs_RL * batch.advantages_RL)[batch.response_mask_RL].sum().backward()
    where = [(batch.sequence_index_RL == i) & batch.response_mask_RL for i in range(num_sequences)]
    grads = {name: p.grad.clone() for name, p in model.named_parameters()}
    model.zero_grad()
    return ([logprobs_RL.detach()[w] for w in where], [entropy_RL[w] for w in where], grads)


@pytest.fixture(scope="module")
def varlen_model(tiny_model_dir):
    from rlvr.models import load_causal_lm

    return load_causal_lm(tiny_model_dir, attn_implementation="varlen")


@pytest.mark.parametrize("shared_attention", ["sdpa", "eager"])
def test_varlen_without_shared_prompts_equals_shared_prompts(tiny_model_dir, varlen_model,
                                                             shared_attention):
    """The same sequences packed whole (share_prompts=False) through rlvr's varlen attention,
    and with each group's prompt packed once through an implementation that confines shared
    prompts: the same logprobs, entropies and gradients. Rows of 24 tokens hold several
    sequences each, so padding and row boundaries are crossed."""
    from rlvr.models import load_causal_lm

    seqs = _grouped_sequences()
    shared = pack_sequences(seqs, 24)
    whole = pack_sequences(seqs, 24, share_prompts=False)
    assert whole.num_tokens > shared.num_tokens and any(len(r) > 1 for r in whole.seq_lens_per_row)
    reference = load_causal_lm(tiny_model_dir, attn_implementation=shared_attention)
    want_lp, want_ent, want_grads = _per_sequence_results(reference, shared, len(seqs))
    got_lp, got_ent, got_grads = _per_sequence_results(varlen_model, whole, len(seqs))
    for want, got in zip(want_lp + want_ent, got_lp + got_ent):
        torch.testing.assert_close(got, want, atol=1e-5, rtol=1e-5)
    for name, want in want_grads.items():
        torch.testing.assert_close(got_grads[name], want, atol=1e-6, rtol=1e-4, msg=name)


def test_sdpa_without_shared_prompts_equals_shared_prompts(tiny_model):
    """share_prompts=False under sdpa's dense mask (each unit one sequence) changes nothing but
    the token count."""
    seqs = _grouped_sequences()
    shared = _per_sequence_results(tiny_model, pack_sequences(seqs, 24), len(seqs))
    whole = _per_sequence_results(tiny_model, pack_sequences(seqs, 24, share_prompts=False),
                                  len(seqs))
    for want, got in zip(shared[0] + shared[1], whole[0] + whole[1]):
        torch.testing.assert_close(got, want, atol=1e-5, rtol=1e-5)
    for name, want in shared[2].items():
        torch.testing.assert_close(whole[2][name], want, atol=1e-6, rtol=1e-4, msg=name)


def test_varlen_forward_equals_flex_with_shared_prompts(varlen_model, flex_model):
    # The compiled flex kernel has no CPU backward: forward only.
    seqs = _grouped_sequences()
    with torch.no_grad():
        flex_RL, _ = forward_logprobs(flex_model, pack_sequences(seqs, 24), 0.7)
        whole = pack_sequences(seqs, 24, share_prompts=False)
        varlen_RL, _ = forward_logprobs(varlen_model, whole, 0.7)
    shared = pack_sequences(seqs, 24)
    for i in range(len(seqs)):
        want = flex_RL[(shared.sequence_index_RL == i) & shared.response_mask_RL]
        got = varlen_RL[(whole.sequence_index_RL == i) & whole.response_mask_RL]
        torch.testing.assert_close(got, want, atol=1e-5, rtol=1e-5)


def test_varlen_under_bf16_autocast_stays_near_float32(tiny_model, varlen_model):
    seqs = _grouped_sequences()
    whole = pack_sequences(seqs, 24, share_prompts=False)
    with torch.no_grad():
        exact_RL, _ = forward_logprobs(tiny_model, whole, 1.0)
        with torch.autocast("cpu", dtype=torch.bfloat16):
            sdpa_RL, _ = forward_logprobs(tiny_model, whole, 1.0)
            varlen_RL, _ = forward_logprobs(varlen_model, whole, 1.0)
    mask = whole.response_mask_RL
    sdpa_gap = float((sdpa_RL - exact_RL)[mask].abs().max())
    varlen_gap = float((varlen_RL - exact_RL)[mask].abs().max())
    assert varlen_gap < max(2 * sdpa_gap, 0.05), (sdpa_gap, varlen_gap)


def test_varlen_model_passes_the_logit_path_check(varlen_model):
    """The check packs without shared prompts for varlen and also calls the model on a plain
    sequence (no cumulative lengths: one causal sequence per row)."""
    from rlvr.learner.attention import check_attention_backward, check_packed_attention
    from rlvr.learner.forward import check_logit_path

    check_logit_path(varlen_model)
    check_attention_backward(varlen_model, HOST)
    check_packed_attention(varlen_model, share_prompts=False)
    with pytest.raises(ValueError, match="shares each group's prompt"):
        check_packed_attention(varlen_model, share_prompts=True)


def _sdpa_reference_varlen(query_THD, key_TKD, value_TKD, cu_q, cu_k, max_q, max_k, **options):
    """What torch's varlen_attn computes (causal), for the fake kernel below."""
    from rlvr.learner.attention import _sdpa_per_sequence

    assert cu_q.dtype == torch.int32 and cu_q is cu_k and max_q == max_k
    return _sdpa_per_sequence(query_THD, key_TKD, value_TKD, cu_q,
                              options.get("scale", query_THD.shape[-1] ** -0.5))


@pytest.mark.parametrize("parameters, expected", [
    # torch 2.9 / 2.10: is_causal, no scale, no GQA (keys repeated for the query heads)
    ({"is_causal", "return_aux"}, {"is_causal": True}),
    # torch 2.11: causal as a window, a scale, still no GQA
    ({"return_aux", "scale", "window_size"}, {"window_size": (-1, 0), "scale": 0.125}),
    # torch 2.12 and later: GQA in the kernel
    ({"return_aux", "scale", "window_size", "enable_gqa"},
     {"window_size": (-1, 0), "scale": 0.125, "enable_gqa": True})])
def test_flash_varlen_call_fits_each_torch_signature(monkeypatch, parameters, expected):
    """The CUDA kernel call, checked here against a stand-in with each torch version's
    signature: causal said the way that torch says it, grouped key heads given as they are or
    repeated, and the output the same as sdpa one sequence at a time."""
    import rlvr.learner.attention as attention

    calls = []

    def fake_varlen(query, key, value, cu_q, cu_k, max_q, max_k, **options):
        calls.append((key.shape[1], options))
        return _sdpa_reference_varlen(query, key, value, cu_q, cu_k, max_q, max_k, **options)

    monkeypatch.setattr(attention, "_torch_varlen_attn", fake_varlen)
    monkeypatch.setattr(attention, "_VARLEN_PARAMETERS", frozenset(parameters))
    gen = torch.Generator().manual_seed(0)
    query_THD = torch.randn(9, 4, 64, generator=gen)
    key_TKD, value_TKD = torch.randn(2, 9, 2, 64, generator=gen)
    cu = torch.tensor([0, 4, 9], dtype=torch.int64)
    out_THD = attention._flash_varlen(query_THD, key_TKD, value_TKD, cu, 5, 0.125)
    key_heads, options = calls[0]
    assert options == expected
    assert key_heads == (2 if "enable_gqa" in parameters else 4)
    want_THD = attention._sdpa_per_sequence(query_THD, key_TKD, value_TKD, cu, 0.125)
    torch.testing.assert_close(out_THD, want_THD)


def test_the_varlen_kernel_is_flash_only_on_cuda_in_16_bits():
    from rlvr.learner.attention import varlen_kernel

    assert varlen_kernel(torch.zeros(2, 1, 8)) == "sdpa per sequence"
    assert varlen_kernel(torch.zeros(2, 1, 8, dtype=torch.bfloat16)) == "sdpa per sequence"


def test_varlen_under_autocast_over_float32_weights_takes_the_flash_kernel(monkeypatch,
                                                                         varlen_model):
    """Autocast casts sdpa's inputs to bf16 but cannot see into rlvr's attention function, and
    over float32 weights the query and key leave the rotary embedding in float32: on an H200
    every layer then ran sdpa once per sequence instead of the flash kernel. Here the kernel is
    chosen as on CUDA (flash for 16-bit inputs, with a stand-in kernel), and must be given
    autocast's dtype for all three inputs, with the per-sequence path's logprobs."""
    import rlvr.learner.attention as attention

    whole = pack_sequences(_grouped_sequences(), 24, share_prompts=False)
    with torch.no_grad(), torch.autocast("cpu", dtype=torch.bfloat16):
        want_RL, _ = forward_logprobs(varlen_model, whole, 1.0)  # sdpa per sequence on CPU
    calls = []

    def fake_varlen(query, key, value, *args, **options):
        calls.append({query.dtype, key.dtype, value.dtype})
        return _sdpa_reference_varlen(query, key, value, *args, **options)

    with monkeypatch.context() as patch:
        patch.setattr(attention, "_torch_varlen_attn", fake_varlen)
        patch.setattr(attention, "_VARLEN_PARAMETERS",
                      frozenset({"scale", "window_size", "enable_gqa"}))
        patch.setattr(attention, "varlen_kernel", lambda query: (
            "torch varlen flash attention" if query.dtype in (torch.bfloat16, torch.float16)
            else "sdpa per sequence"))
        with torch.no_grad(), torch.autocast("cpu", dtype=torch.bfloat16):
            got_RL, _ = forward_logprobs(varlen_model, whole, 1.0)
    assert calls == [{torch.bfloat16}] * varlen_model.config.num_hidden_layers
    torch.testing.assert_close(got_RL, want_RL, atol=0, rtol=0)


@pytest.mark.component  # torch.compile builds C++ kernels: left out of make test-fast
def test_compiled_varlen_layers_equal_eager(tiny_model_dir):
    """Layers compiled as `model.compile` compiles them (dynamic shapes), traced with the
    varlen kwargs (cumulative lengths, an int longest length) on two batch shapes; the capture
    is checked with aot_eager (no code generation), which runs the same graphs."""
    from rlvr.learner.compiling import compile_decoder_layers
    from rlvr.models import load_causal_lm

    seqs = _grouped_sequences()
    eager, compiled = (load_causal_lm(tiny_model_dir, attn_implementation="varlen")
                       for _ in range(2))
    compile_decoder_layers(compiled, backend="aot_eager")
    for batch in (pack_sequences(seqs, 24, share_prompts=False),
                  pack_sequences(seqs[:5], 20, share_prompts=False)):
        want = _per_sequence_results(eager, batch, 5)
        got = _per_sequence_results(compiled, batch, 5)
        for w, g in zip(want[0], got[0]):
            torch.testing.assert_close(g, w, atol=1e-5, rtol=1e-5)
        for name, w in want[2].items():
            torch.testing.assert_close(got[2][name], w, atol=1e-6, rtol=1e-4, msg=name)


@pytest.mark.parametrize("attention, share, device_type, expected", [
    ("auto", None, "cpu", ("sdpa", True)),
    ("auto", None, "cuda", ("varlen", False)),  # measured on an H200 (rlvr.device)
    ("auto", False, "cuda", ("varlen", False)),
    ("auto", True, "cuda", ("sdpa", True)),  # shared prompts asked for: an attention that can
    ("auto", False, "cpu", ("sdpa", False)),
    ("varlen", None, "cpu", ("varlen", False)),
    ("flex", None, "cuda", ("flex", True)),
    ("flash_attention_2", None, "cuda", ("flash_attention_2", False)),
    ("eager", False, "cpu", ("eager", False))])
def test_packed_layout_follows_the_device_and_the_attention(attention, share, device_type,
                                                            expected):
    from rlvr.learner.attention import packed_layout

    layout = packed_layout(attention, share, device_type)
    assert (layout.attention, layout.share_prompts) == expected


def test_shared_prompts_under_whole_sequence_attention_are_refused():
    from rlvr.learner.attention import packed_layout

    with pytest.raises(ValueError, match="share_prompts=true"):
        packed_layout("varlen", True, "cuda")


def test_load_causal_lm_names_the_implementations(tiny_model_dir, tiny_model, flex_model,
                                                  eager_model):
    from rlvr.models import load_causal_lm

    assert tiny_model.config._attn_implementation == "sdpa"  # the default
    assert flex_model.config._attn_implementation == "flex_attention"
    assert eager_model.config._attn_implementation == "eager"
    assert load_causal_lm(tiny_model_dir, attn_implementation="varlen").config \
        ._attn_implementation == "rlvr_varlen"
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
        varlen_tensors = [v for v in varlen.kwargs.values() if isinstance(v, torch.Tensor)]
    finally:
        torch.set_default_device(default)
        tiny_model.zero_grad()
        eager_model.zero_grad()
    for tensor in (logprobs_RL, entropy_RL, eager_RL, flex_RL, lengths_RL, means_RL,
                   *varlen_tensors, varlen.token_index_T):
        assert tensor.device == HOST
