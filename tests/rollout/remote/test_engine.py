"""The remote engine against fake servers (tests/serving/fake_server.py): load spread, retries,
dropped servers, seeds, per-token versions, and the order of a disk weight update."""

from __future__ import annotations

import asyncio
import logging
from pathlib import Path

import pytest
import torch

from rlvr.run.errors import EngineUnavailable
from rlvr.rollout.base import EngineSettings
from rlvr.rollout.remote.engine import RemoteEngine, server_addresses
from rlvr.rollout.seeds import derive_seed
from rlvr.serving.client import ServerError, UnfinishedAnswer, completion_from_choice
from rlvr.types import SamplingParams
from tests.serving.fake_server import running_servers

PARAMS = SamplingParams(n=2, temperature=1.0, max_tokens=4, seed=7)


@pytest.fixture
def servers():
    with running_servers(2) as started:
        yield started


def _engine(servers, tmp_path: Path, **settings) -> RemoteEngine:
    cfg = EngineSettings(weight_update_dir=str(tmp_path / "weight_updates"),
                         **{"server_max_retries": 2, **settings})
    return RemoteEngine([s.address for s in servers], cfg, (2,))


def test_addresses_come_from_the_config_or_the_environment(monkeypatch):
    monkeypatch.setenv("RLVR_LLM_SERVER_ADDRS", "10.0.0.1:8000, http://10.0.0.2:8000")
    assert server_addresses([]) == ["http://10.0.0.1:8000", "http://10.0.0.2:8000"]
    assert server_addresses(["http://h:1"]) == ["http://h:1"]


def test_requests_spread_over_servers_by_load(servers, tmp_path):
    for s in servers:
        s.delay_s = 0.2  # requests overlap, so the in-flight counts decide
    engine = _engine(servers, tmp_path)
    try:
        groups = engine.generate([[1, 5, 6]] * 8, PARAMS)
    finally:
        engine.close()
    assert [len(g) for g in groups] == [2] * 8
    assert [len(s.posted("/inference/v1/generate")) for s in servers] == [4, 4]


def test_each_prompt_gets_the_seed_an_in_process_engine_gives_it(servers, tmp_path):
    engine = _engine(servers[:1], tmp_path)
    try:
        engine.generate([[1, 2], [1, 3], [1, 4]], PARAMS)
    finally:
        engine.close()
    assert sorted(servers[0].generate_seeds) == sorted(derive_seed(7, prompt=i) for i in range(3))


def test_a_failed_request_is_retried_on_another_server(servers, tmp_path):
    servers[0].fail_generate = 100  # answers 500, but stays healthy: not dropped
    engine = _engine(servers, tmp_path)
    try:
        groups = engine.generate([[1, 5]] * 3, PARAMS)
        assert engine.live_addresses() == [s.address for s in servers]
    finally:
        engine.close()
    assert all(len(g) == 2 for g in groups)


def test_a_dead_server_is_dropped_by_address_and_the_rest_carry_on(servers, tmp_path, caplog):
    engine = _engine(servers, tmp_path)
    servers[0].stop()
    try:
        with caplog.at_level(logging.ERROR):
            groups = engine.generate([[1, 5]] * 4, PARAMS)
        assert all(len(g) == 2 for g in groups)
        assert engine.live_addresses() == [servers[1].address]
        assert f"inference server {servers[0].address} dropped" in caplog.text
    finally:
        engine.close()


def test_no_server_left_raises_naming_every_address(servers, tmp_path):
    engine = _engine(servers, tmp_path)
    for s in servers:
        s.stop()
    try:
        with pytest.raises(EngineUnavailable) as err:
            engine.generate([[1, 5]], PARAMS)
    finally:
        engine.close()
    assert all(s.address in str(err.value) for s in servers)


def test_a_sample_a_server_aborted_is_never_taken_as_finished(servers, tmp_path):
    """vLLM answers 200 with finish_reason "abort" and the tokens made so far for every request
    in flight when it stops (SIGTERM: a requeue or preemption stops every job step at once).
    Taken as "stop", those samples were scored and trained on cut short (issue 53: a resumed
    run that departed from the uninterrupted one). The request goes elsewhere instead."""
    servers[0].abort_generate = 100  # stays healthy: retried elsewhere, not dropped
    engine = _engine(servers, tmp_path)
    try:
        groups = engine.generate([[1, 5]] * 6, PARAMS)
    finally:
        engine.close()
    assert len(servers[0].posted("/inference/v1/generate")) > 0  # it was asked, and aborted
    assert all(len(c.token_ids_T) == 4 and c.finish_reason == "length" for g in groups
               for c in g)


def test_a_stopping_server_that_aborts_is_dropped_not_trained_on(servers, tmp_path):
    server = servers[0]
    server.abort_generate, server.stop_on_abort = 1, True
    engine = _engine([server], tmp_path)
    try:
        with pytest.raises(EngineUnavailable, match="unfinished.*'abort' after 2 tokens"):
            engine.generate([[1, 5]], PARAMS)
    finally:
        engine.close()


def test_an_aborted_choice_is_refused_by_name():
    choice = {"index": 0, "token_ids": [5, 6], "finish_reason": "abort", "text": "",
              "logprobs": {"content": [{"logprob": -0.5}] * 2}}
    with pytest.raises(UnfinishedAnswer, match="'abort' after 2 tokens"):
        completion_from_choice(choice)
    del choice["finish_reason"]  # vLLM's own default for a missing reason
    assert completion_from_choice(choice).finish_reason == "stop"


def test_servers_not_answering_at_start_are_named(tmp_path):
    with pytest.raises(EngineUnavailable, match="127.0.0.1:9"):
        RemoteEngine(["http://127.0.0.1:9"], EngineSettings(), (2,))


def test_agenerate_runs_from_another_event_loop(servers, tmp_path):
    engine = _engine(servers, tmp_path)

    async def many():
        return await asyncio.gather(*[engine.agenerate([1, i], PARAMS) for i in range(5)])

    try:
        results = asyncio.run(many())
    finally:
        engine.close()
    assert [len(r) for r in results] == [2] * 5


def test_tokens_carry_the_version_of_their_span():
    choice = {"index": 0, "token_ids": [5, 6, 7, 8], "finish_reason": "length", "text": "",
              "weight_versions": [{"version": "3", "start": 0, "end": 2},
                                  {"version": "4", "start": 2, "end": 4}],
              "logprobs": {"content": [{"logprob": -0.5}] * 4}}
    c = completion_from_choice(choice)
    assert c.versions_T == [3, 3, 4, 4] and c.model_version == 3  # judged by the oldest token
    assert c.finish_reason == "length" and c.logprobs_T == [-0.5] * 4
    choice["weight_versions"] = [{"version": "default", "start": 0, "end": 4}]
    c = completion_from_choice(choice)
    assert c.versions_T is None and c.model_version == 0


def test_a_disk_update_pauses_loads_labels_and_removes_its_directory(servers, tmp_path):
    engine = _engine(servers, tmp_path)
    weights = {"model.embed_tokens.weight": torch.ones(4, 2), "model.norm.weight": torch.ones(2)}
    try:
        engine.update_weights(iter(weights.items()), version=5)
    finally:
        engine.close()
    for s in servers:
        order = [p for p, _ in s.calls]
        # Asked once for the dtype its weights are held in, then the update itself.
        assert order == ["/collective_rpc", "/pause", "/collective_rpc",
                         "/update_weight_version", "/reset_prefix_cache", "/resume"]
        assert s.posted("/collective_rpc")[0]["method"] == "weight_dtype"
        assert s.posted("/pause")[0]["mode"] == "wait"  # no in-flight updates asked for
        assert s.version == "5" and s.reloaded[0].endswith("v5")
        assert s.reloaded_names[0] == sorted(weights)
        assert s.reloaded_dtypes[0] == {"F32"}
    assert not (tmp_path / "weight_updates" / "v5").exists()


@pytest.mark.parametrize("reported, written", [
    (("bfloat16", "bfloat16"), {"BF16", "I64"}),  # all bf16: floats written in bf16
    (("bfloat16", "float32"), {"F32", "I64"}),  # they differ: as the learner holds them
    (("bfloat16", None), {"F32", "I64"}),  # one cannot say (no rlvr extension)
])
def test_a_disk_update_is_written_in_the_dtype_the_servers_hold(servers, tmp_path, reported,
                                                                 written):
    for s, dtype in zip(servers, reported):
        s.weight_dtype = dtype
    engine = _engine(servers, tmp_path)
    weights = {"model.embed_tokens.weight": torch.randn(4, 2),
               "model.norm.weight": torch.ones(2), "steps": torch.arange(3)}
    try:
        for version in (1, 2):
            engine.update_weights(iter(weights.items()), version)
    finally:
        engine.close()
    for s in servers:
        assert s.reloaded_dtypes == [written, written]
        # Asked once for the two pushes (the same servers).
        assert sum(b["method"] == "weight_dtype" for b in s.posted("/collective_rpc")) == 1


def test_a_server_that_fails_its_update_is_dropped(servers, tmp_path):
    servers[0].fail_reload = True
    engine = _engine(servers, tmp_path, inflight_updates=True)
    try:
        engine.update_weights(iter({"w": torch.ones(2)}.items()), version=1)
        assert engine.live_addresses() == [servers[1].address]
        assert servers[0].paused is False  # resumed even though its load failed
        assert servers[1].posted("/pause")[0]["mode"] == "keep"
        servers[1].fail_reload = True
        with pytest.raises(EngineUnavailable, match="weight update to version 2 failed"):
            engine.update_weights(iter({"w": torch.ones(2)}.items()), version=2)
    finally:
        engine.close()


def test_a_rejected_request_is_not_retried(servers, tmp_path, monkeypatch):
    engine = _engine(servers[:1], tmp_path)
    try:
        with pytest.raises(ServerError, match="404"):
            monkeypatch.setattr("rlvr.serving.client.ServerClient.generate",
                                _answers_404(engine), raising=True)
            engine.generate([[1]], PARAMS)
    finally:
        engine.close()


def _answers_404(engine):
    async def generate(self, *args, **kwargs):
        raise ServerError(self.address, "generate answered 404: no such route", retryable=False)
    return generate
