"""A sliding-window model is refused when a sequence can outgrow its window: for a multi-turn
workflow the longest sequence is the prompt and every turn of the episode, not one response."""

import pytest

import rlvr.run.build as build
from rlvr.config import ConfigError, load_config


class PastTheWindowCheck(Exception):
    """Raised by the check that follows the window check: the window check let it through."""


def _gemma(window):
    from transformers import Gemma2Config, Gemma2ForCausalLM

    return Gemma2ForCausalLM(Gemma2Config(vocab_size=64, hidden_size=16, intermediate_size=32,
                                          num_hidden_layers=2, num_attention_heads=2,
                                          num_key_value_heads=1, head_dim=8,
                                          sliding_window=window))


def _build(tmp_path, monkeypatch, window):
    # No data, no tokenizer, no model files: only the model's checks run for real.
    monkeypatch.setattr(build, "build_data", lambda cfg, **kw: ("model-dir", None, None))
    monkeypatch.setattr(build, "check_code_sandbox", lambda *a, **k: None, raising=False)
    monkeypatch.setattr(build, "load_causal_lm", lambda *a, **k: _gemma(window))

    def past(*args, **kwargs):
        raise PastTheWindowCheck
    monkeypatch.setattr(build, "check_packed_attention", past)
    # As configs/tool_use.yaml: prompts of 128, turns of 96, three turns: 128 + 96 = 224 for
    # one response, 128 + 288 = 416 for the whole episode.
    cfg = load_config(None, [f"experiment.output_dir={tmp_path}", "rollout.workflow=tool_use",
                             "rollout.max_turns=3", "rollout.response_length=96",
                             "data.max_prompt_length=128", "algorithm.pack_length=512",
                             "rollout.engine=transformers"])
    return build.build_run(cfg)


def test_a_window_between_one_response_and_the_whole_episode_is_refused(tmp_path, monkeypatch):
    with pytest.raises(ConfigError, match="sliding window of 300 tokens.*longest sequence \\(416"):
        _build(tmp_path, monkeypatch, window=300)


def test_a_window_that_holds_the_whole_episode_passes(tmp_path, monkeypatch):
    with pytest.raises(PastTheWindowCheck):
        _build(tmp_path, monkeypatch, window=416)
