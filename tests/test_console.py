"""The console a person reads (rlvr.console): timestamped lines, announced start-up phases, the
libraries' chatter silenced unless RLVR_DEBUG=1, and the same from Python as from the CLI. On the
code before, a CPU run printed vLLM's Triton and NUMA lines, two FutureWarnings and vLLM's
shard-loading bars; rlvr's lines had no timestamps; nothing said what start-up was doing."""

from __future__ import annotations

import io
import logging
import os
import re
import subprocess
import sys
import warnings
from pathlib import Path

import pytest

from rlvr.console import (THIRD_PARTY_LEVELS, configure_logging, phase, quiet_third_party,
                          requested_level)
from rlvr.rollout.vllm.engine import INSTALL_HINT, vllm_available

CONFIG = str(Path(__file__).parents[1] / "configs" / "tiny.yaml")
# What rlvr itself prints: its timestamped log lines and step lines, and the closing line.
OURS = re.compile(r"^(\d\d:\d\d:\d\d (DEBUG|INFO|WARNING|ERROR) rlvr[.\w]*: |"
                  r"\d\d:\d\d:\d\d step \d+/\d+|done: \d+ steps)")


@pytest.fixture
def logging_state():
    """Loggers' levels, root handlers and warning filters as they were, after the test."""
    names = ["", *THIRD_PARTY_LEVELS]
    levels = {name: logging.getLogger(name).level for name in names}
    handlers = list(logging.getLogger().handlers)
    filters = list(warnings.filters)
    yield
    for name, level in levels.items():
        logging.getLogger(name).setLevel(level)
    logging.getLogger().handlers[:] = handlers
    warnings.filters[:] = filters


def test_lines_are_timestamped_and_configuring_twice_prints_once(logging_state):
    out = io.StringIO()
    configure_logging("info", stream=out)
    configure_logging("info", stream=out)
    logging.getLogger("rlvr.run.build").info("compute: cpu")
    assert re.fullmatch(r"\d\d:\d\d:\d\d INFO rlvr\.run\.build: compute: cpu\n", out.getvalue())


def test_third_party_chatter_is_silenced_unless_debug(logging_state, monkeypatch):
    monkeypatch.delenv("RLVR_DEBUG", raising=False)
    monkeypatch.delenv("TQDM_DISABLE", raising=False)  # restored after the test
    logging.getLogger("vllm").setLevel(logging.NOTSET)
    quiet_third_party()
    assert logging.getLogger("vllm").getEffectiveLevel() == logging.WARNING
    assert os.environ["TQDM_DISABLE"] == "1"  # transformers' GGUF conversion bar, tqdm's own
    assert logging.getLogger("torch._library").getEffectiveLevel() == logging.ERROR
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("default")
        quiet_third_party()  # catch_warnings reset the filters
        warnings.warn_explicit("reduce_op is deprecated", FutureWarning, "dispatcher.py", 138,
                               module="vllm.triton_utils.dispatcher")
        warnings.warn_explicit("ours", FutureWarning, "x.py", 1, module="rlvr.config")
    assert [str(w.message) for w in caught] == ["ours"]  # rlvr's own warnings still show

    monkeypatch.setenv("RLVR_DEBUG", "1")
    logging.getLogger("vllm").setLevel(logging.NOTSET)
    quiet_third_party()
    assert logging.getLogger("vllm").level == logging.NOTSET
    assert requested_level() == logging.DEBUG


def test_log_level_from_the_environment(monkeypatch):
    monkeypatch.delenv("RLVR_DEBUG", raising=False)
    monkeypatch.setenv("RLVR_LOG_LEVEL", "warning")
    assert requested_level() == logging.WARNING
    monkeypatch.setenv("RLVR_LOG_LEVEL", "loud")
    with pytest.raises(ValueError, match="RLVR_LOG_LEVEL='loud'"):
        requested_level()


def test_a_phase_is_announced_then_timed(caplog):
    with caplog.at_level(logging.INFO, logger="rlvr"):
        with phase("engine") as done:
            done["detail"] = "VLLMEngine"
    first, last = [r.getMessage() for r in caplog.records]
    assert first == "engine ..." and re.fullmatch(r"engine: VLLMEngine \(\d+\.\d s\)", last)


def _console(*args: str, env: dict | None = None) -> list[str]:
    done = subprocess.run([sys.executable, "-m", "rlvr.cli", *args], capture_output=True,
                          text=True, timeout=600, env={**os.environ, **(env or {})})
    assert done.returncode == 0, done.stderr[-3000:]
    return [line for line in (done.stderr + done.stdout).splitlines() if line.strip()]


@pytest.mark.component  # vLLM in a process of its own: 20-40 s
@pytest.mark.skipif(not vllm_available(), reason=f"vLLM is not installed: {INSTALL_HINT}")
def test_a_vllm_run_prints_only_rlvr_lines(tmp_path):
    """The tiny run with vLLM, whose import and start printed most of the noise: every console
    line is rlvr's, the phases are announced, and the step lines carry metric names."""
    lines = _console("train", CONFIG, "rollout.engine=vllm", "rollout.vllm.kv_cache_gb=0.05",
                     "rollout.vllm.max_model_len=256", "rewards.num_workers=0",
                     "experiment.total_episodes=16", "logging.progress_bar=true",
                     f"experiment.output_dir={tmp_path / 'run'}", env={"RLVR_DEBUG": "0"})
    noise = [line for line in lines if not OURS.match(line)]
    assert not noise, "\n".join(noise)
    text = "\n".join(lines)
    for announced in ("rlvr: data: training prompts", "rlvr: model: tiny-llama",
                      "rlvr: engine: VLLMEngine", "eval before step 0"):
        assert announced in text, text
    assert re.search(r"step 1/1 objective/verifiable_reward=", text), text


def test_rlvr_eval_announces_its_work(tmp_path, caplog):
    """`rlvr eval` printed nothing until its table: the engine and the eval are announced."""
    from rlvr.cli import main

    with caplog.at_level(logging.INFO, logger="rlvr"):
        assert main(["eval", "tiny-llama", CONFIG, "rewards.num_workers=0", "eval.max_prompts=4",
                     f"experiment.output_dir={tmp_path}"]) == 0
    text = "\n".join(r.getMessage() for r in caplog.records)
    assert "eval of tiny-llama: 4 prompts ..." in text, text
    assert re.search(r"eval of tiny-llama: \d+ prompts: eval/scores=[\d.]+ \(\d+\.\d s\)", text)
    assert "engine: TransformersEngine" in text


def test_the_handler_follows_a_swapped_stderr(logging_state, monkeypatch):
    """A handler bound to the stderr of its configuration wrote to a closed stream once a
    caller (pytest's capsys, a notebook) swapped it."""
    first, second = io.StringIO(), io.StringIO()
    monkeypatch.setattr(sys, "stderr", first)
    configure_logging("info")
    first.close()
    monkeypatch.setattr(sys, "stderr", second)
    logging.getLogger("rlvr.x").info("after the swap")
    assert second.getvalue().endswith("INFO rlvr.x: after the swap\n")


def test_an_engines_library_is_quietened_with_the_others_once_the_console_is(logging_state,
                                                                               monkeypatch):
    """An engine's subpackage adds the library it drives (`quiet_library`, as rlvr.rollout.vllm
    does): nothing changes in a process that only imports rlvr; once rlvr quietens the
    libraries, it is quietened with them, and one added afterwards at once."""
    from rlvr import console

    monkeypatch.delenv("RLVR_DEBUG", raising=False)
    monkeypatch.setattr(console, "_quieted", False)
    monkeypatch.setattr(console, "THIRD_PARTY_LEVELS", dict(console.THIRD_PARTY_LEVELS))
    monkeypatch.setattr(console, "THIRD_PARTY_PACKAGES", set(console.THIRD_PARTY_PACKAGES))
    first, later = logging.getLogger("rlvr_test_engine_a"), logging.getLogger("rlvr_test_engine_b")
    try:
        console.quiet_library(first.name)
        assert first.level == logging.NOTSET
        console.quiet_third_party()
        assert first.level == logging.WARNING
        console.quiet_library(later.name, logging.ERROR)
        assert later.level == logging.ERROR
    finally:
        first.setLevel(logging.NOTSET)
        later.setLevel(logging.NOTSET)
