"""`tool_use`: a Python tool run in the sandbox; errors, hangs, forks and bad calls are fed back
to the model and counted, never raised."""

import asyncio
import json
import sys
import time

import pytest

from rlvr.producer.groups import RewardShaping
from rlvr.rewards.scorer import RewardScorer
from rlvr.types import SamplingParams
from rlvr.workflows import EpisodeRunner, WorkflowSettings
from rlvr.workflows import tool_use as tool_use_module
from rlvr.workflows.tool_use import tool_use
from rlvr.workflows.tools import TOOL_STOP_STRINGS, ToolResult, find_tool_call

from tests.workflows.conftest import ConversationEngine, TurnScriptedEngine

FENCED = "Let me compute.\n```python\nprint(6 * 7)\n```"
CALL = '<tool_call>{"name": "python", "arguments": {"code": "print(1)"}}</tool_call>'
# JSON that json.loads gives up on with other errors than JSONDecodeError.
NESTED = "<tool_call>" + "[" * 1000 + "</tool_call>"  # RecursionError
HUGE_INT = ('<tool_call>{"name": "python", "arguments": {"code": "print(1)"}, "id": '
            + "9" * 4301 + "}</tool_call>")  # ValueError: past Python's 4300-digit limit


def _run(tokenizer, prompt, script, shaping=RewardShaping(), **settings):
    engine = TurnScriptedEngine(tokenizer, script)
    with RewardScorer(num_workers=0) as scorer:
        runner = EpisodeRunner(tool_use, engine, scorer, tokenizer,
                               WorkflowSettings(**{"max_turns": 4, "tool_timeout_s": 2.0,
                                                   **settings}))
        episodes, metrics = runner.run([prompt], SamplingParams(n=1, max_tokens=200),
                                       shaping)
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
                                  "```python\nprint(1)",
                                  "```python\nprint(1)\n```\n```text\nhi\n```"])
def test_a_turn_that_does_not_end_with_a_call_is_an_answer(text):
    assert find_tool_call(text) is None


@pytest.mark.parametrize("text, code", [
    (f"{CALL} No, rather {CALL.replace('print(1)', 'print(2)')}", "print(2)"),
    ("```python\nprint(1)\n```\nNo, rather:\n```python\nprint(2)\n```", "print(2)\n"),
    ("```text\nnot code\n```\n```py\nprint(3)\n```\n", "print(3)\n"),
])
def test_the_call_is_the_last_one_the_turn_ends_with(text, code):
    assert find_tool_call(text).code == code


@pytest.mark.parametrize("text, code", [
    ("<tool_call>" * 16000, None),  # 176,000 characters, no call closed
    ("```python\n" * 17600, None),
    ("```python\n" * 16000 + "x", None),
    ("<tool_call>" * 16000 + CALL, "print(1)"),
    ("x\n" * 88000 + FENCED, "print(6 * 7)\n"),
])
def test_finding_a_call_takes_time_linear_in_the_turn(text, code):
    """It runs on the event loop all episodes share: a backtracking search (3 s for 88,000
    characters, 12 s for 176,000) stalled every episode past its timeout."""
    start = time.perf_counter()
    call = find_tool_call(text)
    assert time.perf_counter() - start < 0.5
    assert (call and call.code) == code


@pytest.mark.parametrize("text, problem", [
    ("<tool_call>{not json</tool_call>", "not valid JSON"),
    ('<tool_call>{"name": "shell", "arguments": {}}</tool_call>', "unknown tool 'shell'"),
    ('<tool_call>{"name": "python", "arguments": {}}</tool_call>', "needs"),
    (NESTED, "not valid JSON (nested too deeply)"),
    (HUGE_INT, "not valid JSON (Exceeds the limit (4300 digits)"),
    ('<tool_call>{"name": "python", "arguments": "' + "[" * 1000 + '"}</tool_call>',
     "arguments are not valid JSON (nested too deeply)"),
    ('<tool_call>{"name": "' + "A" * 5000 + '"}</tool_call>', "unknown tool 'AAAA"),
])
def test_a_malformed_call_says_why(text, problem):
    call = find_tool_call(text)
    assert call.code is None and problem in call.problem and len(call.problem) < 200


@pytest.mark.parametrize("limit", [1000, 2000, 10000])
def test_deep_nesting_is_refused_whatever_the_recursion_limit(limit):
    """The parser's depth limit was the process's recursion limit: after torch's compile path
    raised it to 2000 (another test, earlier in the same worker), 1000 `[`s parsed on to
    "Expecting value at char 1000" and two cases above failed, depending on the test order."""
    before = sys.getrecursionlimit()
    sys.setrecursionlimit(limit)
    try:
        problems = [find_tool_call(NESTED).problem, find_tool_call(
            '<tool_call>{"name": "python", "arguments": "' + "[" * 1000 + '"}</tool_call>'
        ).problem]
        # Brackets inside a string are code, not nesting.
        code = "x = " + "[" * 600 + "]" * 600 + ' # "quoted" \\ \n'
        call = find_tool_call("<tool_call>" + json.dumps(
            {"name": "python", "arguments": {"code": code}}) + "</tool_call>")
    finally:
        sys.setrecursionlimit(before)
    assert [p.split("(")[-1] for p in problems] == ["nested too deeply)"] * 2, problems
    assert call.code == code


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


@pytest.mark.parametrize("bad", [NESTED, HUGE_INT])
def test_a_call_the_json_parser_gives_up_on_is_fed_back_not_raised(tiny_tokenizer, chat_prompt,
                                                                   bad):
    """Raised, it failed the episode and lost the group; from every prompt, the run."""
    engine, episodes, metrics = _run(tiny_tokenizer, chat_prompt(), [bad, "42"],
                                     max_episode_tokens=100_000)
    assert "not valid JSON" in _tool_text(tiny_tokenizer, engine, episodes.groups[0][0])
    assert metrics["workflow/errors"] == 0 and metrics["tools/malformed"] == 1
    assert episodes.groups[0][0].reward == 1.0


@pytest.mark.parametrize("turn, shown", [
    ('<tool_call>{"name": "' + "A" * 20000 + '", "arguments": {}}</tool_call>',
     "unknown tool 'AAAA"),
    ("```python\nprint('x' * 5000)\n```", "[output cut at 200 characters]"),
])
def test_every_tool_message_is_cut_to_tool_output_chars(tiny_tokenizer, chat_prompt, turn,
                                                        shown):
    engine, episodes, _ = _run(tiny_tokenizer, chat_prompt(), [turn, "42"],
                               tool_output_chars=200, max_episode_tokens=100_000)
    given = _tool_text(tiny_tokenizer, engine, episodes.groups[0][0])
    assert shown in given and len(given) < 300


def test_a_sample_that_raises_stops_its_siblings_and_loses_only_its_group(
        tiny_tokenizer, chat_prompt, monkeypatch):
    """The runner's rule: the group is left out and counted, not scored 0 (a raise is not the
    model's doing). Its other samples stop with it, instead of running on into the next step,
    where their engine calls would be decoded in that step's batches."""
    async def tool(code, timeout_s, *_):
        if "boom" in code:
            raise RuntimeError("the sandbox cannot start")
        await asyncio.sleep(0.3)
        return ToolResult("42\n", False, False)

    def reply(conversation, turn, k):
        if "Q-tools" not in conversation:
            return "The answer is 42."
        return "```python\nboom()\n```" if turn == 0 and k == 0 else FENCED

    monkeypatch.setattr(tool_use_module, "run_python_tool", tool)
    engine = ConversationEngine(tiny_tokenizer, reply)
    params = SamplingParams(n=2, max_tokens=200)
    with RewardScorer(num_workers=0) as scorer:
        runner = EpisodeRunner(tool_use, engine, scorer, tiny_tokenizer,
                               WorkflowSettings(max_turns=4), max_batch_wait_s=0.05)
        episodes, metrics = runner.run([chat_prompt("Q-tools: 6 * 7?", i=0),
                                        chat_prompt("Q-plain: 6 * 7?", i=1)],
                                       params, RewardShaping())
        assert [g[0].prompt.id for g in episodes.groups] == ["q/1"]
        assert metrics["workflow/errors"] == 1
        time.sleep(0.6)  # a sibling left running has finished its tool call by now
        step_two = len(engine.requests)
        runner.run([chat_prompt("Q-next: 6 * 7?", i=2)], params, RewardShaping())
        runner.close()
    asked = [tiny_tokenizer.decode(ids) for ids, _ in engine.requests[step_two:]]
    assert asked and all("Q-next" in text for text in asked)


def test_tool_calls_stop_at_max_tool_calls(tiny_tokenizer, chat_prompt):
    _, episodes, metrics = _run(tiny_tokenizer, chat_prompt(), [FENCED], max_tool_calls=2,
                                max_turns=10)
    assert metrics["tools/calls"] == 2 and metrics["tools/turns_mean"] == 3
    assert episodes.groups[0][0].reward == 0.0  # never answered


def test_the_overlong_penalty_sees_the_tool_calling_turns_too(tiny_tokenizer, chat_prompt):
    """A tool call that runs to the length limit before a short answer was not penalised: only
    the last turn's length was counted."""
    verbose_call = "Let me compute." + " Hmm." * 60 + "\n```python\nprint(6 * 7)\n```"
    n_call = len(tiny_tokenizer.encode(verbose_call, add_special_tokens=False))
    shaping = RewardShaping(overlong_buffer=20, max_tokens=n_call, overlong_penalty_factor=0.5)
    _, episodes, metrics = _run(tiny_tokenizer, chat_prompt(), [verbose_call, "42"], shaping)
    assert metrics["tools/calls"] == 1
    assert episodes.groups[0][0].reward == 0.5  # right, less the first turn's full penalty
    _, plain, _ = _run(tiny_tokenizer, chat_prompt(), [FENCED, "42"], shaping)
    assert plain.groups[0][0].reward == 1.0
