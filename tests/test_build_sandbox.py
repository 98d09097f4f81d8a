"""A run that executes answers' code checks the sandbox's namespaces at start: where the kernel
refuses them it stops, unless rewards.allow_weak_sandbox=true, and then says so."""

import logging
import os
from types import SimpleNamespace

import pytest

from rlvr.run.input_checks import check_code_sandbox
from rlvr.config import ConfigError, load_config
from rlvr.rewards import sandbox
from rlvr.rewards.sandbox import ALLOW_WEAK_ENV, runner


def data_naming(*verifiers: str) -> SimpleNamespace:
    prompt = SimpleNamespace(verifiers=verifiers)
    return SimpleNamespace(train=SimpleNamespace(sources=[("src", [prompt], 1.0)]),
                           eval_prompts=[])


@pytest.fixture
def refused(monkeypatch):
    """A kernel that refuses user namespaces (faked)."""
    fake = lambda: "fake: user namespaces refused"  # noqa: E731
    monkeypatch.setattr(runner, "namespaces_refused", fake)  # what run_tests asks
    monkeypatch.setattr(sandbox, "namespaces_refused", fake)  # what the run's start asks
    monkeypatch.setenv(ALLOW_WEAK_ENV, "0")  # recorded, so what the run sets is undone after


def test_refused_namespaces_stop_a_code_run_at_start(refused):
    cfg = load_config("configs/tiny.yaml", [])
    with pytest.raises(ConfigError, match="fake: user namespaces refused.*allow_weak_sandbox"):
        check_code_sandbox(cfg, data_naming("code"))


def test_the_weak_mode_is_allowed_by_the_switch_and_said(refused, caplog, monkeypatch):
    cfg = load_config("configs/tiny.yaml", ["rewards.allow_weak_sandbox=true"])
    with caplog.at_level(logging.WARNING, logger="rlvr.run.build"):
        check_code_sandbox(cfg, data_naming("gsm8k", "code"))
    assert "in-process guards only" in caplog.text
    assert os.environ[ALLOW_WEAK_ENV] == "1"  # the scorer's workers inherit it
    assert runner.run_tests("x = 1", ["assert x == 1"]).isolation == "weak"


def test_a_run_without_code_does_not_care(refused):
    check_code_sandbox(load_config("configs/tiny.yaml", []), data_naming("gsm8k"))


def test_the_tool_use_workflow_needs_the_sandbox(refused):
    cfg = load_config("configs/tool_use.yaml", [])
    with pytest.raises(ConfigError, match="allow_weak_sandbox"):
        check_code_sandbox(cfg, data_naming("last_number"))


def test_this_host_offers_namespaces():
    """CI runs where namespaces work: the real sandbox, not the fallback, is what it tests."""
    assert runner.namespaces_refused() is None
