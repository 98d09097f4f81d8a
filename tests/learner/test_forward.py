"""Packed forward passes give the same logprobs as running each sequence alone; logits in
chunks give what all at once gives. The attention implementations: test_attention.py."""


import torch

from rlvr.algorithm.packing import SequenceToPack, pack_sequences
from rlvr.learner.forward import forward_logprobs


def _alone_logprobs(model, prompt, response, temperature):
    ids = torch.tensor([prompt + response])
    logits = model(input_ids=ids).logits[0, :-1].float() / temperature
    logp = torch.log_softmax(logits, -1).gather(-1, ids[0, 1:, None]).squeeze(-1)
    return logp[len(prompt) - 1:]  # logprobs of the response tokens


def test_packed_logprobs_equal_unpacked(tiny_model):
    gen = torch.Generator().manual_seed(0)
    seqs = []
    for i, (p, r) in enumerate([(5, 7), (9, 3), (4, 11), (6, 6), (12, 2)]):
        prompt = torch.randint(3, 250, (p,), generator=gen).tolist()
        response = torch.randint(3, 250, (r,), generator=gen).tolist()
        seqs.append(SequenceToPack(prompt, response, [0.0] * r, advantage=1.0, index=i))
    batch = pack_sequences(seqs, pack_length=32)
    assert batch.num_rows >= 2 and any(len(l) > 1 for l in batch.seq_lens_per_row)
    with torch.no_grad():
        packed_RL, _ = forward_logprobs(tiny_model, batch, temperature=0.7)
    for s in seqs:
        where = batch.sequence_index_RL == s.index
        got = packed_RL[where & batch.response_mask_RL]
        want = _alone_logprobs(tiny_model, s.prompt_ids, s.response_ids, 0.7)
        torch.testing.assert_close(got, want, atol=1e-5, rtol=1e-5)


def test_padding_does_not_make_nan_gradients(tiny_model):
    seqs = [SequenceToPack([4, 5, 6], [7, 8], [0.0, 0.0], 1.0, 0),
            SequenceToPack([4, 5, 6, 9, 10, 11], [7], [0.0], 1.0, 1)]
    batch = pack_sequences(seqs, pack_length=8)  # two rows, the first padded
    logp_RL, _ = forward_logprobs(tiny_model, batch, temperature=1.0)
    logp_RL[batch.response_mask_RL].sum().backward()
    assert all(torch.isfinite(p.grad).all() for p in tiny_model.parameters() if p.grad is not None)


def test_group_sharing_one_prompt_matches_unpacked(tiny_model):
    """Four responses after one shared prompt get the logprobs each would get alone."""
    gen = torch.Generator().manual_seed(1)
    prompt = torch.randint(3, 250, (9,), generator=gen).tolist()
    seqs = [SequenceToPack(prompt, torch.randint(3, 250, (n,), generator=gen).tolist(),
                           [0.0] * n, advantage=0.0, index=i) for i, n in enumerate([5, 1, 7, 3])]
    batch = pack_sequences(seqs, pack_length=64)
    assert batch.seq_lens_per_row == [[9 + 5 + 1 + 7 + 3]]  # the prompt is packed once
    with torch.no_grad():
        packed_RL, _ = forward_logprobs(tiny_model, batch, temperature=1.3)
    for s in seqs:
        got = packed_RL[(batch.sequence_index_RL == s.index) & batch.response_mask_RL]
        want = _alone_logprobs(tiny_model, s.prompt_ids, s.response_ids, 1.3)
        torch.testing.assert_close(got, want, atol=1e-5, rtol=1e-5)


def test_logits_in_chunks_give_the_same_logprobs_entropy_and_gradients(tiny_model):
    """Chunks of 3 response tokens (each chunk's logits recomputed in backward) against all
    logits at once: same values, same gradient on every weight."""
    from rlvr.learner.forward import response_hidden, token_logprobs

    torch.manual_seed(0)
    seqs = [SequenceToPack([1, 5, 6, 7], [8, 9, 10, 11, 2], [0.0] * 5, 1.0, 0),
            SequenceToPack([1, 12, 13], [14, 15, 16], [0.0] * 3, -0.5, 1)]
    batch = pack_sequences(seqs, pack_length=32)
    targets_N = batch.input_ids_RL[batch.response_mask_RL]
    results = []
    for chunk in (3, 10_000):
        tiny_model.zero_grad()
        logp_N, ent_N = token_logprobs(tiny_model, response_hidden(tiny_model, batch), targets_N,
                                       0.7, with_entropy=True, chunk_tokens=chunk)
        (logp_N * torch.linspace(-1, 1, len(logp_N))).sum().backward()
        grads = [p.grad.clone() for p in tiny_model.parameters()]
        results.append((logp_N.detach(), ent_N, grads))
    (lp_a, ent_a, g_a), (lp_b, ent_b, g_b) = results
    torch.testing.assert_close(lp_a, lp_b, rtol=0, atol=1e-6)
    torch.testing.assert_close(ent_a, ent_b, rtol=0, atol=1e-6)
    for a, b in zip(g_a, g_b):
        torch.testing.assert_close(a, b, rtol=1e-4, atol=1e-5)  # summed in another order
    # The entropy is -sum p log p of the temperature-scaled distribution, worked out directly.
    with torch.no_grad():
        logp_NV = torch.log_softmax(
            tiny_model.lm_head(response_hidden(tiny_model, batch)).float() / 0.7, dim=-1)
        torch.testing.assert_close(ent_a, -(logp_NV.exp() * logp_NV).sum(-1), rtol=0, atol=1e-5)


def test_a_batch_without_response_tokens_still_runs_the_head(tiny_model):
    from rlvr.learner.forward import token_logprobs

    hidden = torch.zeros(0, tiny_model.config.hidden_size, requires_grad=True)
    logp_N, _ = token_logprobs(tiny_model, hidden, torch.zeros(0, dtype=torch.long), 1.0)
    assert logp_N.shape == (0,) and logp_N.grad_fn is not None
    logp_N.sum().backward()  # a sharded peer with rows must not wait on a missing gradient
    assert tiny_model.lm_head.weight.grad is not None


def test_no_logits_of_the_whole_micro_batch_exist_forward_or_backward(tiny_model, monkeypatch):
    """The learner's head runs in chunks: no tensor as wide as the vocabulary ever holds more
    rows than a chunk, in the forward pass (logits, their float32 copy, the softmax for the
    entropy) nor in the backward pass (each chunk's logits recomputed, their gradient)."""
    from torch.utils._python_dispatch import TorchDispatchMode

    import rlvr.learner.forward as forward

    class WidestLogits(TorchDispatchMode):
        rows = 0

        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            out = func(*args, **(kwargs or {}))
            for t in (out if isinstance(out, (tuple, list)) else (out,)):
                if isinstance(t, torch.Tensor) and t.dim() >= 2 and t.shape[-1] == vocab \
                        and tuple(t.shape) != (hidden, vocab):  # the head's weight, transposed
                    WidestLogits.rows = max(WidestLogits.rows, t.numel() // vocab)
            return out

    vocab, hidden = tiny_model.config.vocab_size, tiny_model.config.hidden_size
    monkeypatch.setattr(forward, "LOGIT_CHUNK_TOKENS", 4)
    gen = torch.Generator().manual_seed(3)
    seqs = [SequenceToPack([1, 5, 6], torch.randint(3, 250, (n,), generator=gen).tolist(),
                           [0.0] * n, 1.0, i) for i, n in enumerate([7, 9, 5])]
    batch = pack_sequences(seqs, pack_length=64)
    assert batch.num_response_tokens == 21
    with WidestLogits():
        logprobs_RL, entropy_RL = forward_logprobs(tiny_model, batch, 0.7, with_entropy=True)
        logprobs_RL[batch.response_mask_RL].sum().backward()
    assert WidestLogits.rows == 4  # [4, V] logits seen, never [21, V]
    assert entropy_RL[batch.response_mask_RL].shape == (21,)
