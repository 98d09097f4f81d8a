"""The transformers engine: shapes, stop/length, seeds, logprobs, weight updates."""

import math

import pytest
import torch

from rlvr.algorithm.packing import SequenceToPack, pack_sequences
from rlvr.learner.forward import forward_logprobs
from rlvr.rollout.transformers.engine import TransformersEngine, sample_tokens
from rlvr.types import SamplingParams


def _engine(model, tokenizer, max_batch_rows=256, decode="auto"):
    return TransformersEngine(model, tokenizer, (tokenizer.eos_token_id,), tokenizer.pad_token_id,
                              max_batch_rows=max_batch_rows, decode=decode)


PROMPTS = [[1, 90, 91, 92, 2, 1, 70], [1, 80, 81, 2, 1, 70, 71, 72, 73]]


def test_returns_n_completions_with_logprobs(tiny_model, tiny_tokenizer):
    out = _engine(tiny_model, tiny_tokenizer).generate(
        PROMPTS, SamplingParams(n=3, temperature=1.0, max_tokens=10, seed=0))
    assert [len(g) for g in out] == [3, 3]
    for c in (c for g in out for c in g):
        assert len(c.token_ids_T) == len(c.logprobs_T) <= 10
        assert c.finish_reason == ("length" if len(c.token_ids_T) == 10 and
                                   c.token_ids_T[-1] != tiny_tokenizer.eos_token_id else "stop")
        assert all(lp <= 0 for lp in c.logprobs_T)


@pytest.mark.parametrize("decode", ["dynamic", "static"])
def test_engine_logprobs_match_learner_logprobs(tiny_model, tiny_tokenizer, decode):
    """The engine's sampled-token logprobs equal the learner's packed forward at T=0.7, with
    either decoding path."""
    engine = _engine(tiny_model, tiny_tokenizer, max_batch_rows=3, decode=decode)  # chunks
    groups = engine.generate(PROMPTS, SamplingParams(n=2, temperature=0.7, max_tokens=12, seed=1))
    seqs = [SequenceToPack(PROMPTS[i], c.token_ids_T, c.logprobs_T, 0.0, 2 * i + k)
            for i, g in enumerate(groups) for k, c in enumerate(g)]
    batch = pack_sequences(seqs, pack_length=64)
    with torch.no_grad():
        local_RL, _ = forward_logprobs(tiny_model, batch, temperature=0.7)
    mask = batch.response_mask_RL
    torch.testing.assert_close(local_RL[mask], batch.engine_logprobs_RL[mask], atol=1e-4, rtol=0)


def test_same_seed_same_samples(tiny_model, tiny_tokenizer):
    engine = _engine(tiny_model, tiny_tokenizer)
    params = SamplingParams(n=2, temperature=1.0, max_tokens=8, seed=123)
    a = engine.generate(PROMPTS, params)
    b = engine.generate(PROMPTS, params)
    assert [[c.token_ids_T for c in g] for g in a] == [[c.token_ids_T for c in g] for g in b]


def test_stop_token_ends_generation_and_length_truncates(tiny_model, tiny_tokenizer):
    engine = _engine(tiny_model, tiny_tokenizer)
    greedy = engine.generate(PROMPTS, SamplingParams(n=1, temperature=0.0, max_tokens=6))
    assert all(c.finish_reason == "length" and len(c.token_ids_T) == 6 for g in greedy for c in g)
    first = greedy[0][0].token_ids_T[0]
    stopped = engine.generate(PROMPTS, SamplingParams(n=1, temperature=0.0, max_tokens=6,
                                                      stop_token_ids=(first,)))
    assert stopped[0][0].token_ids_T == [first] and stopped[0][0].finish_reason == "stop"
    # The other prompt's row keeps decoding after its neighbour finished (row pruning).
    assert stopped[1][0].token_ids_T[:1] == greedy[1][0].token_ids_T[:1]


def test_stop_string_ends_generation(tiny_model, tiny_tokenizer):
    engine = _engine(tiny_model, tiny_tokenizer)
    greedy = engine.generate(PROMPTS, SamplingParams(n=1, temperature=0.0, max_tokens=6))
    text = tiny_tokenizer.decode(greedy[0][0].token_ids_T[:3])
    stopped = engine.generate(PROMPTS, SamplingParams(n=1, temperature=0.0, max_tokens=6,
                                                      stop_strings=(text[-1],)))
    assert stopped[0][0].finish_reason == "stop" and len(stopped[0][0].token_ids_T) <= 3


def test_update_weights_changes_samples_and_version(tiny_model, tiny_tokenizer, tiny_model_dir):
    from rlvr.models import load_causal_lm

    engine = _engine(load_causal_lm(tiny_model_dir), tiny_tokenizer)
    params = SamplingParams(n=1, temperature=0.0, max_tokens=8)
    before = engine.generate(PROMPTS, params)
    with torch.no_grad():
        for p in tiny_model.parameters():
            p.add_(torch.randn_like(p) * 0.5)
    engine.update_weights(tiny_model.state_dict().items(), version=7)
    after = engine.generate(PROMPTS, params)
    assert after[0][0].model_version == 7
    assert [c.token_ids_T for g in before for c in g] != [c.token_ids_T for g in after for c in g]


def test_top_p_keeps_only_the_nucleus():
    logits = torch.log(torch.tensor([[0.5, 0.3, 0.15, 0.05]]))
    gen = torch.Generator().manual_seed(0)
    seen = {int(sample_tokens(logits, 1.0, 0.7, gen)[0]) for _ in range(200)}
    assert seen == {0, 1}  # 0.5 + 0.3 reaches 0.7: tokens 2 and 3 are never drawn
    tok, logp = sample_tokens(logits, 1.0, 1.0, gen)
    assert torch.isclose(logp, torch.log(torch.tensor([0.5, 0.3, 0.15, 0.05]))[tok])


def test_top_p_logprobs_are_over_the_nucleus_it_sampled_from():
    # Nucleus {0.5, 0.3} at top_p 0.7, renormalised: token 0 has 0.5 / 0.8 = 0.625, token 1
    # 0.375 (vLLM's convention). Before, the engine reported log 0.5 / log 0.3.
    logits = torch.log(torch.tensor([[0.5, 0.3, 0.15, 0.05]]))
    gen = torch.Generator().manual_seed(0)
    for _ in range(20):
        tok, logp = sample_tokens(logits, 1.0, 0.7, gen)
        expected = {0: 0.625, 1: 0.375}[int(tok)]
        assert float(logp) == pytest.approx(math.log(expected), abs=1e-6)
