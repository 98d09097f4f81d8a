"""The engine protocol's module: which engine `rollout.engine` names."""

from __future__ import annotations

import logging


def test_auto_is_vllm_where_installed_else_transformers_with_a_reason(monkeypatch, caplog):
    from rlvr.rollout.base import resolve_engine_name

    assert resolve_engine_name("transformers") == "transformers"
    monkeypatch.setattr("rlvr.rollout.vllm_engine.vllm_available", lambda: True)
    assert resolve_engine_name("auto") == "vllm"
    monkeypatch.setattr("rlvr.rollout.vllm_engine.vllm_available", lambda: False)
    with caplog.at_level(logging.WARNING):
        assert resolve_engine_name("auto") == "transformers"
    assert "vLLM is not installed" in caplog.text
