"""Engines as Ray actors: the same completions as an engine in this process, weights broadcast
into them, and a dead engine ends the call with a clear error instead of a hang."""

from __future__ import annotations

import time
from contextlib import contextmanager

import pytest
import torch

from rlvr.rollout.base import EngineSettings
from rlvr.distributed.engine_group import EngineGroup, EngineGroupError, share_params, split_evenly
from rlvr.rollout import create_engine
from rlvr.types import SamplingParams

PROMPTS = [[5, 17, 33], [8, 9], [40, 41, 42, 43], [7], [100, 3, 4]]
GREEDY = SamplingParams(n=2, temperature=0.0, max_tokens=6)


def _engines(tiny_model_dir, tiny_tokenizer, n: int, dtype: str = "float32") -> EngineGroup:
    return EngineGroup(n, "transformers", tiny_model_dir, EngineSettings(dtype=dtype),
                       (tiny_tokenizer.eos_token_id,), tiny_tokenizer.pad_token_id,
                       num_threads=1, cpus_per_engine=1.0, timeout_s=60)


def _local(tiny_model_dir, tiny_tokenizer, dtype: str = "float32"):
    return create_engine("transformers", tiny_model_dir, EngineSettings(dtype=dtype),
                         (tiny_tokenizer.eos_token_id,), tiny_tokenizer.pad_token_id)


@contextmanager
def one_thread():
    """As the actors compute (`num_threads=1`): bf16 sums split over other thread counts
    may round apart."""
    previous = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        yield
    finally:
        torch.set_num_threads(previous)


def _as_shared(local, prompts, params, num_engines: int = 2):
    """The local engine's answers to `prompts` computed as the group computes them: each
    engine's share in a batch of its own, on one thread. A batch of other prompts pads to
    another length, and in bf16 that alone moves logprobs by up to 0.03 on an AVX2-only CPU
    (emulated bf16 kernels round by shape; with AVX512-BF16 they happened to agree)."""
    with one_thread():
        return [group for k, share in enumerate(split_evenly(prompts, num_engines))
                for group in local.generate(share, share_params(params, k))]


def _tokens(groups):
    return [[(c.token_ids_T, c.model_version) for c in g] for g in groups]


@pytest.mark.parametrize("items, parts, want", [
    ([1, 2, 3, 4, 5], 2, [[1, 2, 3], [4, 5]]),
    ([1, 2], 3, [[1], [2]]),
    ([], 2, []),
])
def test_split_evenly(items, parts, want):
    assert split_evenly(items, parts) == want


@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
def test_two_engine_actors_answer_like_one_local_engine_and_take_pushed_weights(
        ray_session, tiny_model_dir, tiny_tokenizer, dtype):
    """fp32 weights pushed to bf16 engines travel in bf16 (half the bytes) and load as the
    local engine's own cast of them."""
    local = _local(tiny_model_dir, tiny_tokenizer, dtype)
    engines = _engines(tiny_model_dir, tiny_tokenizer, 2, dtype)
    try:
        want = _as_shared(local, PROMPTS, GREEDY)
        assert _tokens(engines.generate(PROMPTS, GREEDY)) == _tokens(want)
        gen = torch.Generator().manual_seed(3)
        new = {name: t.float() + torch.randn(t.shape, generator=gen) * 0.5
               for name, t in local.model.state_dict().items()}
        for version in (1, 2):  # the group forms at the first push and is reused
            new = {name: t * 0.9 for name, t in new.items()}
            engines.update_weights(new.items(), version)
            local.update_weights(new.items(), version)
            assert {spec.dtype for spec in engines._transport.wire} == {getattr(torch, dtype)}
            want = _as_shared(local, PROMPTS, GREEDY)
            got = engines.generate(PROMPTS, GREEDY)
            assert _tokens(got) == _tokens(want)
            assert {c.model_version for g in got for c in g} == {version}
            for g_got, g_want in zip(got, want):
                for a, b in zip(g_got, g_want):
                    torch.testing.assert_close(torch.tensor(a.logprobs_T),
                                               torch.tensor(b.logprobs_T), atol=1e-5, rtol=0)
    finally:
        engines.close()


def test_a_dead_engine_actors_share_is_redone_and_an_engine_is_taken_back(
        ray_session, tiny_model_dir, tiny_tokenizer):
    """An engine actor that dies (as on a lost node) is not the group's end while another
    lives: its share is redone on the live one with its own seed (the same answers as an
    undisturbed group), and the next weight push forms a new group, starting an engine where
    Ray has room again; it gets the weights before it generates
    (`rlvr.distributed.engine_membership`)."""
    local = _local(tiny_model_dir, tiny_tokenizer)
    engines = _engines(tiny_model_dir, tiny_tokenizer, 2)
    try:
        ray_session.kill(engines.actors[1], no_restart=True)
        start = time.monotonic()
        assert _tokens(engines.generate(PROMPTS, GREEDY)) == _tokens(
            _as_shared(local, PROMPTS, GREEDY))
        assert time.monotonic() - start < 30
        assert engines.membership_metrics() == {
            "engines/live": 1.0, "engines/lost_total": 1.0, "engines/joined_total": 0.0}
        new = {name: t.float() * 0.9 for name, t in local.model.state_dict().items()}
        engines.update_weights(new.items(), 1)  # the survivor and a new engine receive it
        local.update_weights(new.items(), 1)
        assert engines.membership_metrics()["engines/live"] == 2.0
        assert engines.membership_metrics()["engines/joined_total"] == 1.0
        got = engines.generate(PROMPTS, GREEDY)
        assert _tokens(got) == _tokens(_as_shared(local, PROMPTS, GREEDY))
        assert {c.model_version for g in got for c in g} == {1}
    finally:
        engines.close()


def test_the_last_dead_engine_actor_fails_the_call_with_a_clear_error(
        ray_session, tiny_model_dir, tiny_tokenizer):
    engines = _engines(tiny_model_dir, tiny_tokenizer, 2)
    for actor in engines.actors:
        ray_session.kill(actor, no_restart=True)
    start = time.monotonic()
    with pytest.raises(EngineGroupError, match="every engine was lost during generation"):
        engines.generate(PROMPTS, GREEDY)
    assert time.monotonic() - start < 30
    with pytest.raises(EngineGroupError, match="failed earlier"):
        engines.generate(PROMPTS, GREEDY)
    engines.close()
