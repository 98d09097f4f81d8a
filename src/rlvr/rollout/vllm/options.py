"""The vLLM engine's options (`rollout.vllm`, `rlvr.config.schema.VllmOptions`) as an engine
receives them: inside `EngineSettings.engine_options`, under its name."""

from __future__ import annotations

from rlvr.config.schema import VllmOptions


def vllm_options(settings) -> VllmOptions:
    """The vLLM section of an engine's settings (the defaults where the run sent none)."""
    return settings.engine_options.get("vllm") or VllmOptions()
