"""Shared fixtures: the tiny model built from a config (no download), loaded once per session."""

from __future__ import annotations

import os

import pytest
import torch

# One thread per test process keeps timings steady on the 2-core CI machine.
torch.set_num_threads(int(os.environ.get("RLVR_TEST_THREADS", "2")))


@pytest.fixture(scope="session")
def tiny_model_dir() -> str:
    from rlvr.models import resolve_model_dir

    return resolve_model_dir("tiny-llama")


@pytest.fixture(scope="session")
def tiny_tokenizer(tiny_model_dir):
    from rlvr.models import load_tokenizer

    return load_tokenizer(tiny_model_dir)


@pytest.fixture
def tiny_model(tiny_model_dir):
    from rlvr.models import load_causal_lm

    return load_causal_lm(tiny_model_dir)


@pytest.fixture(autouse=True)
def _fp32_unless_asked(monkeypatch):
    """Tests compare numbers at fp32 tolerances; on a CPU with native bf16, `model.bf16_autocast`
    null would turn bf16 on. Pin the detection to "not native" (tests of the detection itself
    patch `rlvr.device.cpu_flags`)."""
    import rlvr.device

    monkeypatch.setattr(rlvr.device, "cpu_has_native_bf16", lambda: False)
    monkeypatch.setattr("rlvr.build.cpu_has_native_bf16", lambda: False, raising=False)
