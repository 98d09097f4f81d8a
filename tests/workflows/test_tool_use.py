"""`tool_use`: a Python tool run in the sandbox; errors, hangs, forks and bad calls are fed back
to the model and counted, never raised."""

import pytest

from rlvr.producer.groups import RewardShaping
from rlvr.rewards.scorer import RewardScorer
from rlvr.types import SamplingParams
from rlvr.workflows import EpisodeRunner, WorkflowSettings
from rlvr.workflows.tool_use import tool_use
from rlvr.workflows.tools import TOOL_STOP_STRINGS, find_tool_call

from tests.workflows.conftest import TurnScriptedEngine

FENCED = "Let me compute.\n```python\nprint(6 * 7)\n```"


def _run(tokenizer, prompt, script, **settings):
    engine = TurnScriptedEngine(tokenizer, script)
    with RewardScorer(num_workers=0) as scorer:
        runner = EpisodeRunner(tool_use, engine, scorer, tokenizer,
                               WorkflowSettings(**{"max_turns": 4, "tool_timeout_s": 2.0,
                                                   **settings}))
        episodes, metrics = runner.run([prompt], SamplingParams(n=1, max_tokens=200),
                                       RewardShaping())
        runner.close()
    return engine, episodes, metrics


def _tool_text(tokenizer, engine, sample):
    c = sample.completion
    given = [t for t, m in zip(c.token_ids_T, c.loss_mask_T) if m == 0]
    return tokenizer.decode(given)


@pytest.mark.parametrize("text, code", [
    (FENCED, "print(6 * 7)\n"),
    ('<tool_call>{"name": "python", "arguments": {"code": "print(1)"}}</tool_call>', "print(1)"),
    ('<tool_call>{"name": "python", "arguments": "{\\"code\\": \\"x = 2\\"}"}</tool_call>\n',
     "x = 2"),
])
def test_tool_calls_are_found_in_both_forms(text, code):
    assert find_tool_call(text).code == code


@pytest.mark.parametrize("text", ["The answer is 42.", "```python\nprint(1)\n```\nSo 42.",
                                  "```python\nprint(1)"])
def test_a_turn_that_does_not_end_with_a_call_is_an_answer(text):
    assert find_tool_call(text) is None


@pytest.mark.parametrize("text, problem", [
    ("<tool_call>{not json</tool_call>", "not valid JSON"),
    ('<tool_call>{"name": "shell", "arguments": {}}</tool_call>', "unknown tool 'shell'"),
    ('<tool_call>{"name": "python", "arguments": {}}</tool_call>', "needs"),
])
def test_a_malformed_call_says_why(text, problem):
    call = find_tool_call(text)
    assert call.code is None and problem in call.problem


def test_the_tools_output_comes_back_as_a_tool_turn(tiny_tokenizer, chat_prompt):
    engine, episodes, metrics = _run(tiny_tokenizer, chat_prompt(),
                                     [FENCED, "The answer is 42."])
    sample = episodes.groups[0][0]
    assert _tool_text(tiny_tokenizer, engine, sample) == (
        "\n<|im_start|>tool\n42\n<|im_end|>\n<|im_start|>assistant\n")
    assert sample.reward == 1.0
    assert set(TOOL_STOP_STRINGS) <= set(engine.requests[0][1].stop_strings)
    assert metrics["tools/calls"] == 1 and metrics["tools/errors"] == 0
    assert metrics["tools/turns_mean"] == 2 and metrics["tools/used_mean"] == 1


@pytest.mark.parametrize("code, counter, shown", [
    ("print(1 / 0)", "tools/errors", "ZeroDivisionError: division by zero"),
    ("import os\nos.fork()", "tools/errors", "os.fork is not allowed"),
    ("while True:\n    pass", "tools/timeouts", "did not finish within 1 s"),
])
def test_failing_forking_and_hanging_tools_are_bounded_fed_back_and_counted(
        tiny_tokenizer, chat_prompt, code, counter, shown):
    engine, episodes, metrics = _run(tiny_tokenizer, chat_prompt(),
                                     [f"```python\n{code}\n```", "42"], tool_timeout_s=1.0)
    assert shown in _tool_text(tiny_tokenizer, engine, episodes.groups[0][0])
    assert metrics[counter] == 1 and metrics["workflow/errors"] == 0
    assert episodes.groups[0][0].reward == 1.0  # the episode went on to its answer


def test_a_malformed_call_is_fed_back_and_counted(tiny_tokenizer, chat_prompt):
    engine, episodes, metrics = _run(tiny_tokenizer, chat_prompt(),
                                     ["<tool_call>{oops</tool_call>", "42"])
    assert "not valid JSON" in _tool_text(tiny_tokenizer, engine, episodes.groups[0][0])
    assert metrics["tools/malformed"] == 1 and metrics["tools/calls"] == 1


def test_tool_calls_stop_at_max_tool_calls(tiny_tokenizer, chat_prompt):
    _, episodes, metrics = _run(tiny_tokenizer, chat_prompt(), [FENCED], max_tool_calls=2,
                                max_turns=10)
    assert metrics["tools/calls"] == 2 and metrics["tools/turns_mean"] == 3
    assert episodes.groups[0][0].reward == 0.0  # never answered
