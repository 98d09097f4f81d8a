"""Static decoding (rlvr.rollout.transformers.static_decode) against the dynamic path on the tiny model: the
same samples where both draw the same random numbers, the cache reused across calls without
leaking, stop strings and the fallbacks (the logprobs the learner agrees with: in
transformers/test_engine.py, for both paths)."""

import logging

import pytest
import torch

from rlvr.rollout.transformers.static_decode import (SlotKVCache, StaticDecoder, decode_mask, prefill_mask,
                                        unsupported_reason)
from rlvr.rollout.transformers.engine import TransformersEngine
from rlvr.types import SamplingParams

PROMPTS = [[1, 90, 91, 92, 2, 1, 70], [1, 80, 81, 2, 1, 70, 71, 72, 73], [5, 6]]


def _engine(model, tokenizer, decode, eos=None, **kw):
    eos = (tokenizer.eos_token_id,) if eos is None else eos
    return TransformersEngine(model, tokenizer, eos, tokenizer.pad_token_id, decode=decode, **kw)


def _tokens(groups):
    return [[c.token_ids_T for c in g] for g in groups]


def _max_logprob_gap(a, b):
    return max(abs(x - y) for ga, gb in zip(a, b) for ca, cb in zip(ga, gb)
               for x, y in zip(ca.logprobs_T, cb.logprobs_T))


def test_auto_is_dynamic_on_cpu_and_static_when_asked(tiny_model, tiny_tokenizer):
    assert _engine(tiny_model, tiny_tokenizer, "auto").static is None
    static = _engine(tiny_model, tiny_tokenizer, "static").static
    assert isinstance(static, StaticDecoder) and not static.use_graphs  # no CUDA graphs on CPU
    with pytest.raises(ValueError, match="transformers_decode"):
        _engine(tiny_model, tiny_tokenizer, "fast")


def test_greedy_samples_equal_the_dynamic_path(tiny_model, tiny_tokenizer):
    params = SamplingParams(n=3, temperature=0.0, max_tokens=40)
    dynamic = _engine(tiny_model, tiny_tokenizer, "dynamic").generate(PROMPTS, params)
    static = _engine(tiny_model, tiny_tokenizer, "static").generate(PROMPTS, params)
    assert _tokens(static) == _tokens(dynamic)
    assert ([c.finish_reason for g in static for c in g]
            == [c.finish_reason for g in dynamic for c in g])
    assert _max_logprob_gap(static, dynamic) < 1e-5


def test_sampled_tokens_equal_the_dynamic_path_while_no_row_has_stopped(tiny_model,
                                                                        tiny_tokenizer):
    """Both paths draw one multinomial over every row each step until a row stops; then the
    dynamic path draws over fewer rows and the streams part (same distribution, other draws).
    With no stop token they never part."""
    params = SamplingParams(n=3, temperature=1.0, max_tokens=40, seed=3)
    dynamic = _engine(tiny_model, tiny_tokenizer, "dynamic", eos=()).generate(PROMPTS, params)
    static = _engine(tiny_model, tiny_tokenizer, "static", eos=()).generate(PROMPTS, params)
    assert _tokens(static) == _tokens(dynamic)
    assert _max_logprob_gap(static, dynamic) < 1e-5
    # With the stop token: identical up to the first step at which some row stopped.
    dynamic = _engine(tiny_model, tiny_tokenizer, "dynamic").generate(PROMPTS, params)
    static = _engine(tiny_model, tiny_tokenizer, "static").generate(PROMPTS, params)
    first_stop = min(len(c.token_ids_T) for g in dynamic for c in g if c.finish_reason == "stop")
    assert ([t[:first_stop] for g in _tokens(static) for t in g]
            == [t[:first_stop] for g in _tokens(dynamic) for t in g])


def test_a_stop_token_ends_a_row_where_the_dynamic_path_ends_it(tiny_model, tiny_tokenizer):
    greedy = SamplingParams(n=1, temperature=0.0, max_tokens=30)
    first = _engine(tiny_model, tiny_tokenizer, "dynamic").generate(PROMPTS, greedy)
    stop = first[0][0].token_ids_T[5]
    params = SamplingParams(n=2, temperature=0.0, max_tokens=30, stop_token_ids=(stop,))
    dynamic = _engine(tiny_model, tiny_tokenizer, "dynamic").generate(PROMPTS, params)
    static = _engine(tiny_model, tiny_tokenizer, "static").generate(PROMPTS, params)
    assert _tokens(static) == _tokens(dynamic)
    assert static[0][0].token_ids_T[-1] == stop and static[0][0].finish_reason == "stop"


def test_stop_strings_end_rows_at_the_token_that_completes_them(tiny_model, tiny_tokenizer):
    """The host looks at tokens only every sync_every steps; a stop string found in a block
    still ends its row at the token that completed it, as the dynamic path's per-token test
    does (the streams agree until the first row stops, then part as above)."""
    params = SamplingParams(n=3, temperature=1.0, max_tokens=40, seed=5, stop_strings=("e", "a"))
    dynamic = _engine(tiny_model, tiny_tokenizer, "dynamic", eos=()).generate(PROMPTS, params)
    engine = _engine(tiny_model, tiny_tokenizer, "static", eos=())
    engine.static.sync_every = 7  # blocks that do not divide the length
    static = engine.generate(PROMPTS, params)
    first_stop = min(len(c.token_ids_T) for g in dynamic for c in g if c.finish_reason == "stop")
    assert ([t[:first_stop] for g in _tokens(static) for t in g]
            == [t[:first_stop] for g in _tokens(dynamic) for t in g])
    stops = [c for g in static for c in g if c.finish_reason == "stop"]
    assert stops
    for c in (c for g in static for c in g):
        ends = [engine._stop_string_at(c.token_ids_T, end, params)
                for end in range(1, len(c.token_ids_T) + 1)]
        assert ends == [False] * (len(ends) - 1) + [c.finish_reason == "stop"]


def test_the_cache_is_reused_across_calls_without_leaking(tiny_model, tiny_tokenizer):
    """A second call of the same shape reuses the first's cache (and, on CUDA, its graph):
    what the first left in later slots must not reach the second's samples."""
    params = SamplingParams(n=2, temperature=1.0, max_tokens=20, seed=9)
    other = [[7, 8, 9, 10, 11, 12, 13], [40, 41, 42, 43, 44, 45, 46, 47, 48], [3, 4]]
    engine = _engine(tiny_model, tiny_tokenizer, "static")
    engine.generate(other, params)
    state = engine.static._graph
    second = engine.generate(PROMPTS, params)
    assert engine.static._graph is state  # same rows and length bucket: same cache
    fresh = _engine(tiny_model, tiny_tokenizer, "static").generate(PROMPTS, params)
    assert _tokens(second) == _tokens(fresh)


def test_new_weights_reach_the_next_call(tiny_model, tiny_tokenizer):
    params = SamplingParams(n=1, temperature=0.0, max_tokens=8)
    engine = _engine(tiny_model, tiny_tokenizer, "static")
    before = engine.generate(PROMPTS, params)
    scaled = {k: v * 1.5 for k, v in tiny_model.state_dict().items() if "embed" in k}
    engine.update_weights(scaled.items(), version=3)
    after = engine.generate(PROMPTS, params)
    assert after[0][0].model_version == 3
    assert _max_logprob_gap(after, before) > 0.1  # the new weights scored these tokens


def test_an_eager_attention_model_takes_an_additive_mask(tiny_model_dir, tiny_tokenizer):
    from rlvr.models import load_causal_lm

    model = load_causal_lm(tiny_model_dir, attn_implementation="eager")
    params = SamplingParams(n=2, temperature=0.0, max_tokens=16)
    dynamic = _engine(model, tiny_tokenizer, "dynamic").generate(PROMPTS, params)
    static = _engine(model, tiny_tokenizer, "static").generate(PROMPTS, params)
    assert _tokens(static) == _tokens(dynamic)


def test_models_it_cannot_serve_fall_back_to_dynamic_decoding(tiny_model_dir, tiny_tokenizer,
                                                              caplog):
    from rlvr.models import load_causal_lm

    model = load_causal_lm(tiny_model_dir, attn_implementation="varlen")
    assert "takes no explicit mask" in unsupported_reason(model)
    with caplog.at_level(logging.WARNING):
        engine = _engine(model, tiny_tokenizer, "static")
    assert engine.static is None and "decoding dynamically" in caplog.text
    model.config.layer_types = ["sliding_attention", "full_attention"]
    model.config._attn_implementation = "sdpa"
    assert "other than full attention" in unsupported_reason(model)


def test_a_failed_graph_capture_decodes_eagerly(tiny_model, tiny_tokenizer, caplog):
    engine = _engine(tiny_model, tiny_tokenizer, "static")
    engine.static.use_graphs = True  # on CPU the capture itself fails: the fallback runs
    params = SamplingParams(n=2, temperature=0.0, max_tokens=10)
    with caplog.at_level(logging.WARNING):
        out = engine.generate(PROMPTS, params)
    assert "decoding eagerly" in caplog.text and not engine.static.use_graphs
    dynamic = _engine(tiny_model, tiny_tokenizer, "dynamic").generate(PROMPTS, params)
    assert _tokens(out) == _tokens(dynamic)


def test_masks_hide_padding_and_unwritten_slots():
    attn_PW = torch.tensor([[0, 1, 1], [1, 1, 1]])
    m = prefill_mask(attn_PW, "sdpa", torch.float32)[:, 0]  # [P, W, W]
    assert m[0].tolist() == [[True, False, False], [False, True, False], [False, True, True]]
    assert m[1].tolist() == [[True, False, False], [True, True, False], [True, True, True]]
    d = decode_mask(attn_PW, 5, "eager", torch.float32)[:, 0, 0]  # [B, L] additive
    assert (d[0, 1:3] == 0).all() and (d[0, [0, 3, 4]] == torch.finfo(torch.float32).min).all()


def test_slot_cache_writes_where_told_and_copies_rows():
    prefill = SlotKVCache(rows=2, length=3, device=torch.device("cpu"), dtype=torch.float32)
    k = torch.arange(2 * 1 * 3 * 2, dtype=torch.float32).view(2, 1, 3, 2)
    prefill.update(k, -k, 0)
    cache = SlotKVCache(rows=4, length=6, device=torch.device("cpu"), dtype=torch.float32)
    cache.fill_from(prefill, torch.tensor([0, 0, 1, 1]))
    assert torch.equal(cache.keys[0][2, :, :3], k[1]) and torch.equal(cache.values[0][1, :, :3], -k[0])
    cache.write_at_1.fill_(4)
    keys, _ = cache.update(torch.ones(4, 1, 1, 2), torch.ones(4, 1, 1, 2), 0)
    assert keys.shape == (4, 1, 6, 2) and (keys[:, :, 4] == 1).all() and (keys[:, :, 5] == 0).all()


def test_grouped_decode_attention_equals_sdpa_over_repeated_kv_heads():
    from rlvr.rollout.transformers.static_decode import grouped_decode_attention

    torch.manual_seed(0)
    b, g, k, length, d = 3, 2, 3, 10, 8  # 6 query heads over 2 KV heads
    q = torch.randn(b, g * k, 1, d)
    key, value = torch.randn(b, g, length, d), torch.randn(b, g, length, d)
    mask = torch.rand(b, 1, 1, length) > 0.3
    mask[:, ..., -1] = True
    out, _ = grouped_decode_attention(None, q, key, value, mask, scaling=0.3)
    want = torch.nn.functional.scaled_dot_product_attention(
        q, key.repeat_interleave(k, dim=1), value.repeat_interleave(k, dim=1), attn_mask=mask,
        scale=0.3).transpose(1, 2)
    torch.testing.assert_close(out, want)


def test_the_config_names_the_decoding_and_engines_receive_it():
    from rlvr.config import ConfigError, load_config
    from rlvr.run.settings import engine_settings

    with pytest.raises(ConfigError, match="rollout.transformers_decode='fast'"):
        load_config(None, ["rollout.transformers_decode=fast"])
    cfg = load_config(None, ["rollout.transformers_decode=static", "rollout.cuda_graphs=false"])
    settings = engine_settings(cfg, "cpu", False)
    assert (settings.transformers_decode, settings.cuda_graphs) == ("static", False)
