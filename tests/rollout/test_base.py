"""The engine registry: a record per engine, `auto` resolved by asking each engine's own
availability, and the facts the rest of the house asks instead of an engine's name."""

from __future__ import annotations

import logging
from pathlib import Path

import pytest

from rlvr.registry import Registry
from rlvr.rollout import ENGINES, engine_record
from rlvr.rollout.base import (Engine, EngineSettings, create_engine, register_engine,
                               resolve_engine_name)


def _factory(model_dir, cfg, eos, pad):
    return ("built", model_dir)


@pytest.fixture
def engines(monkeypatch):
    """A registry of the test's own, so no fake engine outlives the test."""
    table: Registry[Engine] = Registry("rollout.engine")
    monkeypatch.setattr("rlvr.rollout.base.ENGINES", table)
    monkeypatch.setattr("rlvr.rollout.ENGINES", table)
    return table


def test_auto_is_vllm_where_installed_else_transformers_with_a_reason(monkeypatch, caplog):
    assert resolve_engine_name("transformers") == "transformers"
    monkeypatch.setattr("rlvr.rollout.vllm.engine.vllm_available", lambda: True)
    assert resolve_engine_name("auto") == "vllm"
    monkeypatch.setattr("rlvr.rollout.vllm.engine.vllm_available", lambda: False)
    with caplog.at_level(logging.WARNING):
        assert resolve_engine_name("auto") == "transformers"
    assert "not vllm: the vLLM engine needs vLLM" in caplog.text


def test_auto_asks_engines_in_preference_order_and_skips_what_does_not_suit(engines, caplog):
    register_engine("fast", available=lambda: "fastlib is not installed",
                    auto_preference=0)(_factory)
    register_engine("solo", auto_preference=1, beside_local_ranks=False)(_factory)
    register_engine("plain", auto_preference=5)(_factory)
    register_engine("named_only")(_factory)  # never chosen by auto
    with caplog.at_level(logging.WARNING):
        assert resolve_engine_name("auto") == "solo"
    assert "not fast: fastlib is not installed" in caplog.text

    def beside(engine: Engine) -> str | None:
        return None if engine.beside_local_ranks else "needs the process to itself"

    assert resolve_engine_name("auto", beside) == "plain"
    assert "not solo: needs the process to itself" in caplog.text
    assert resolve_engine_name("named_only") == "named_only"


def test_auto_with_nothing_usable_names_every_reason(engines):
    register_engine("fast", available=lambda: "fastlib is missing", auto_preference=0)(_factory)
    with pytest.raises(RuntimeError, match="not fast: fastlib is missing"):
        resolve_engine_name("auto")


def test_an_unavailable_engine_named_outright_fails_with_its_reason(engines):
    register_engine("fast", available=lambda: "pip install fastlib")(_factory)
    with pytest.raises(RuntimeError, match="rollout.engine=fast: pip install fastlib"):
        create_engine("fast", "/m", EngineSettings(), (0,), 0)
    register_engine("ok")(_factory)
    assert create_engine("ok", "/m", EngineSettings(), (0,), 0) == ("built", "/m")


def test_a_bare_registration_gets_the_defaults_and_returns_the_factory(engines):
    assert register_engine("mine")(_factory) is _factory
    record = engines.lookup("mine")
    assert (record.available(), record.auto_preference, record.beside_local_ranks,
            record.can_sleep, record.uses_servers, record.tensor_parallel) == \
        (None, None, True, False, False, False)
    assert record.receiving_ranks(EngineSettings(tensor_parallel_size=4)) == 1


def test_the_built_in_engines_state_their_facts():
    """What used to be `if engine == "vllm"` elsewhere is each record's answer."""
    assert {"transformers", "vllm", "remote"} <= set(ENGINES)
    vllm, transformers, remote = (engine_record(n) for n in ("vllm", "transformers", "remote"))
    assert vllm.auto_preference < transformers.auto_preference and remote.auto_preference is None
    assert transformers.available() is None  # the fallback runs wherever torch does
    assert vllm.can_sleep and not transformers.can_sleep and not remote.can_sleep
    assert not vllm.beside_local_ranks and transformers.beside_local_ranks
    assert remote.uses_servers and not vllm.uses_servers
    # Each of vLLM's tensor-parallel workers receives a weight broadcast as a rank of its own.
    assert vllm.receiving_ranks(EngineSettings(tensor_parallel_size=2)) == 2
    assert transformers.receiving_ranks(EngineSettings(tensor_parallel_size=2)) == 1


def test_rlvr_env_reports_each_engine_usable_or_why_not(engines):
    from rlvr.environment import _engine_lines

    register_engine("fast", available=lambda: "pip install fastlib")(_factory)
    register_engine("plain", version=lambda: "1.2")(_factory)
    assert _engine_lines() == [("rollout.engine=fast", "not usable: pip install fastlib"),
                               ("rollout.engine=plain", "usable, 1.2")]


def test_a_named_engines_own_checks_refuse_the_config_before_anything_loads(engines):
    from rlvr.config import ConfigError, load_config
    from rlvr.run.input_checks import check_registered_names

    def picky_checks(cfg) -> list[str]:
        if cfg.rollout.dtype == "float32":
            return []
        return [f"rollout.engine=picky needs rollout.dtype=float32, not {cfg.rollout.dtype}"]

    register_engine("picky", checks=picky_checks)(_factory)
    config = Path(__file__).parents[2] / "configs" / "tiny.yaml"
    cfg = load_config([str(config)], ["rollout.engine=picky", "rollout.dtype=bfloat16"])
    with pytest.raises(ConfigError, match="picky needs rollout.dtype=float32, not bfloat16"):
        check_registered_names(cfg)
    check_registered_names(load_config([str(config)], ["rollout.engine=picky",
                                                        "rollout.dtype=float32"]))
