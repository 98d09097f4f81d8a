"""The transformers engine's static decoding on CUDA: the decode step captured once as a CUDA
graph and replayed, samples as the dynamic path's where both draw the same random numbers."""

import torch

from rlvr.rollout.transformers.engine import TransformersEngine
from rlvr.types import SamplingParams

PROMPTS = [[1, 90, 91, 92, 2, 1, 70], [1, 80, 81, 2, 1, 70, 71, 72, 73], [5, 6]]


def _engine(model, tokenizer, decode, eos):
    return TransformersEngine(model, tokenizer, eos, tokenizer.pad_token_id, decode=decode)


def test_static_decoding_on_cuda_replays_one_graph_and_samples_as_dynamic(tiny_model_dir,
                                                                         tiny_tokenizer):
    from rlvr.models import load_causal_lm

    model = load_causal_lm(tiny_model_dir).to("cuda")
    static = _engine(model, tiny_tokenizer, "auto", ())  # auto is static on CUDA
    assert static.static is not None and static.static.use_graphs
    dynamic = _engine(model, tiny_tokenizer, "dynamic", ())
    for params in (SamplingParams(n=3, temperature=0.0, max_tokens=40),
                   SamplingParams(n=3, temperature=1.0, max_tokens=40, seed=4)):
        a, b = static.generate(PROMPTS, params), dynamic.generate(PROMPTS, params)
        assert [[c.token_ids_T for c in g] for g in a] == [[c.token_ids_T for c in g] for g in b]
        gap = max(abs(x - y) for ga, gb in zip(a, b) for ca, cb in zip(ga, gb)
                  for x, y in zip(ca.logprobs_T, cb.logprobs_T))
        assert gap < 1e-4
    assert static.static.use_graphs and static.static.graph_captures == 1  # one shape, one graph
