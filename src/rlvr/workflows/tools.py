"""The Python tool of the `tool_use` workflow: finding a call in a model turn, and running it.

A turn calls the tool when it ends with either form a model may have learnt:
- `<tool_call>{"name": "python", "arguments": {"code": "..."}}</tool_call>` (the JSON tool-call
  format of Qwen/Hermes-style chat templates; `arguments` may also be a JSON string);
- a fenced ```python block (the form code-interpreter models use).
A turn that ends otherwise is the answer. A call that cannot be read (bad JSON, another tool's
name, no code) is not an answer either: the reason goes back to the model as the tool's output
and counts as malformed.

The code runs in the code verifier's sandbox (`rlvr.rewards.code.run_tests`), with its limits:
a process of its own, a wall-clock limit, no network, no forks, writes only in a scratch
directory. Whatever it prints (and an exception's message) is the tool's output, cut to
`max_chars`. A sandbox that cannot start at all raises: a broken host, not the model's error.
"""

from __future__ import annotations

import asyncio
import json
import re
from dataclasses import dataclass

from rlvr.rewards.code import run_tests

TOOL_NAME = "python"
# Stop sampling where a call is complete, so the tool runs before the model goes on.
TOOL_STOP_STRINGS = ("</tool_call>", "\n```\n")
_TAGGED = re.compile(r"<tool_call>(.*?)</tool_call>\s*$", re.DOTALL)
_FENCED = re.compile(r"```(?:python|python3|py)?[ \t]*\n(.*?)```\s*$", re.DOTALL)


@dataclass(frozen=True)
class ToolCall:
    code: str | None  # None: the call could not be read
    problem: str = ""  # why not, for the model and the logs


@dataclass(frozen=True)
class ToolResult:
    output: str  # what the model is shown
    failed: bool  # the code raised (or the call was malformed)
    timed_out: bool


def find_tool_call(text: str) -> ToolCall | None:
    """The call `text` ends with, or None if it ends as an answer."""
    tagged = _TAGGED.search(text)
    if tagged:
        return _parse_tagged(tagged.group(1))
    if text.count("```") % 2 == 0:  # a closed fence ends the turn, not one still open
        fenced = _FENCED.search(text)
        if fenced:
            return ToolCall(fenced.group(1))
    return None


def _parse_tagged(body: str) -> ToolCall:
    try:
        call = json.loads(body)
    except json.JSONDecodeError as e:
        return ToolCall(None, f"the tool call is not valid JSON ({e.msg} at char {e.pos})")
    if not isinstance(call, dict) or call.get("name") != TOOL_NAME:
        name = call.get("name") if isinstance(call, dict) else None
        return ToolCall(None, f"unknown tool {name!r}; the only tool is {TOOL_NAME!r}")
    arguments = call.get("arguments", {})
    if isinstance(arguments, str):
        try:
            arguments = json.loads(arguments)
        except json.JSONDecodeError:
            return ToolCall(None, "the tool call's arguments are not valid JSON")
    code = arguments.get("code") if isinstance(arguments, dict) else None
    if not isinstance(code, str) or not code.strip():
        return ToolCall(None, 'the python tool needs {"code": "<python source>"}')
    return ToolCall(code)


async def run_python_tool(code: str, timeout_s: float, max_chars: int) -> ToolResult:
    """Run `code` in the sandbox (in a thread: the episode loop keeps going)."""
    # One trivial test: it passes only if the code itself ran without raising.
    run = await asyncio.to_thread(run_tests, code, ("pass",), timeout_s=timeout_s)
    if run.timed_out:
        return ToolResult(f"Error: the code did not finish within {timeout_s:g} s.", True, True)
    output = run.output.replace("<solution>: ", "")
    if len(output) > max_chars:
        output = output[:max_chars] + f"\n... [output cut at {max_chars} characters]"
    failed = not all(run.passed)
    return ToolResult(output if output.strip() else "(no output)", failed, False)
