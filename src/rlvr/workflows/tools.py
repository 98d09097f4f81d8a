"""The Python tool of the `tool_use` workflow: finding a call in a model turn, and running it.

A turn calls the tool when it ends with either form a model may have learnt:
- `<tool_call>{"name": "python", "arguments": {"code": "..."}}</tool_call>` (the JSON tool-call
  format of Qwen/Hermes-style chat templates; `arguments` may also be a JSON string);
- a fenced ```python block (the form code-interpreter models use), its fences on lines of
  their own.
A turn that ends otherwise is the answer. A call that cannot be read (bad JSON, JSON nested too
deeply or with an integer past Python's digit limit, another tool's name, no code) is not an
answer either: the reason goes back to the model as the tool's output and counts as malformed.

Finding a call is a linear scan, not a regular expression: a lazy `(.*?)` before an end anchor
retries from every opening tag, quadratic in the turn's length ('<tool_call>' * 8000 took 3 s),
and it runs on the event loop every episode shares.

The code runs in the code verifier's sandbox (`rlvr.rewards.code.run_tests`), with its limits:
a process of its own, a wall-clock limit, no network, no forks, writes only in a scratch
directory. At most one call per CPU runs at once (`EpisodeContext.sandboxed`): the limit is
wall-clock time, fair only while a call has a core to itself. Whatever it prints (and an
exception's message) is the tool's output. Every tool message, an error about a call included,
is cut to `rollout.tool_output_chars` (`cut_output`) before the model sees it. A sandbox that
cannot start at all raises: a broken host, not the model's error.
"""

from __future__ import annotations

import asyncio
import json
import re
from dataclasses import dataclass
from typing import Awaitable, Callable

from rlvr.rewards.code import FENCE, SandboxRun, closed_blocks, run_tests

TOOL_NAME = "python"
# Stop sampling where a call is complete, so the tool runs before the model goes on.
TOOL_STOP_STRINGS = ("</tool_call>", "\n```\n")
_OPEN_TAG, _CLOSE_TAG = "<tool_call>", "</tool_call>"
_NAME_CHARS = 40  # of a wrong tool name, echoed in the error (the model may write any length)


@dataclass(frozen=True)
class ToolCall:
    code: str | None  # None: the call could not be read
    problem: str = ""  # why not, for the model and the logs


@dataclass(frozen=True)
class ToolResult:
    output: str  # what the model is shown, before `cut_output`
    failed: bool  # the code raised (or the call was malformed)
    timed_out: bool


def find_tool_call(text: str) -> ToolCall | None:
    """The call `text` ends with, or None if it ends as an answer."""
    body = _tagged_body(text)
    if body is not None:
        return _parse_tagged(body)
    code = _fenced_code(text)
    return None if code is None else ToolCall(code)


def _tagged_body(text: str) -> str | None:
    """What lies between the last `<tool_call>` and the `</tool_call>` that ends `text` (only
    whitespace after it), or None if `text` does not end so."""
    end = text.rstrip()
    if not end.endswith(_CLOSE_TAG):
        return None
    close = len(end) - len(_CLOSE_TAG)
    start = end.rfind(_OPEN_TAG, 0, close)
    return None if start < 0 else end[start + len(_OPEN_TAG):close]


def _fenced_code(text: str) -> str | None:
    """The code of the ```python (or unlabelled) block whose closing fence ends `text` (only
    whitespace after it); None if `text` ends otherwise, with a fence that opens a block, or
    with the end of a block in another language. Fences as the code verifier reads them
    (`rlvr.rewards.code.closed_blocks`)."""
    lines = text.rstrip().split("\n")  # not splitlines(): code may hold \x0c, \u2028, ...
    if lines[-1].strip() != FENCE:
        return None
    last = None
    for last in closed_blocks(lines):
        pass
    if last is None or last[0] != len(lines) - 1 or last[1] is None:
        return None  # the last fence opened a block, or closed one in another language
    return "".join(line + "\n" for line in last[1])


def _parse_tagged(body: str) -> ToolCall:
    call, problem = _load_json(body)
    if problem:
        return ToolCall(None, f"the tool call is not valid JSON ({problem})")
    if not isinstance(call, dict) or call.get("name") != TOOL_NAME:
        name = call.get("name") if isinstance(call, dict) else None
        return ToolCall(None, f"unknown tool {_shown_name(name)}; the only tool is "
                              f"{TOOL_NAME!r}")
    arguments = call.get("arguments", {})
    if isinstance(arguments, str):
        arguments, problem = _load_json(arguments)
        if problem:
            return ToolCall(None, f"the tool call's arguments are not valid JSON ({problem})")
    code = arguments.get("code") if isinstance(arguments, dict) else None
    if not isinstance(code, str) or not code.strip():
        return ToolCall(None, 'the python tool needs {"code": "<python source>"}')
    return ToolCall(code)


# Deeper JSON is refused before it is parsed: the parser's own limit is the process's
# recursion limit, which torch's compile path raises from 1000 to 2000, so whether 1000 `[`s
# parsed depended on what had run before in the process.
MAX_JSON_DEPTH = 500
_JSON_MARKS = re.compile(r'[\\"\[\]{}]')  # what changes the nesting or the string state


def json_depth(text: str) -> int:
    """The deepest nesting of arrays and objects in `text`, brackets inside strings aside: one
    pass over its marks (a regular expression over strings would retry from every quote)."""
    depth = deepest = 0
    in_string, escaped_until = False, -1
    for mark in _JSON_MARKS.finditer(text):
        char, at = mark.group(), mark.start()
        if at < escaped_until:  # the character a backslash escapes
            continue
        if in_string:
            if char == "\\":
                escaped_until = at + 2
            elif char == '"':
                in_string = False
        elif char == '"':
            in_string = True
        elif char in "[{":
            depth += 1
            deepest = max(deepest, depth)
        elif char in "]}":
            depth = max(depth - 1, 0)
    return deepest


def _load_json(text: str) -> tuple[object, str]:
    """`text`'s JSON value and "", or None and why it has none. Besides bad syntax, the parser
    raises RecursionError for deep nesting and ValueError for an integer of more than 4300
    digits (Python's limit): a model can write either, and neither may end the episode (it
    would lose the whole group). Nesting past `MAX_JSON_DEPTH` is refused first, so the answer
    does not depend on the process's recursion limit."""
    if json_depth(text) > MAX_JSON_DEPTH:
        return None, "nested too deeply"
    try:
        return json.loads(text), ""
    except json.JSONDecodeError as e:
        return None, f"{e.msg} at char {e.pos}"
    except RecursionError:
        return None, "nested too deeply"
    except ValueError as e:  # "Exceeds the limit (4300 digits) for integer string conversion..."
        return None, str(e).split(":")[0]


def _shown_name(name: object) -> str:
    """A wrong tool name as the error shows it: cut short, and only a string's text (the repr
    of a deeply nested list could itself raise)."""
    if not isinstance(name, str):
        return "None" if name is None else f"(a JSON {type(name).__name__}, not a name)"
    return repr(name) if len(name) <= _NAME_CHARS else repr(name[:_NAME_CHARS]) + "..."


def cut_output(text: str, max_chars: int) -> str:
    """A tool message as the model sees it: at most `max_chars` of `text`, and a note if cut."""
    if len(text) <= max_chars:
        return text
    return text[:max_chars] + f"\n... [output cut at {max_chars} characters]"


async def run_python_tool(code: str, timeout_s: float,
                          on_thread: Callable[..., Awaitable[SandboxRun]] = asyncio.to_thread
                          ) -> ToolResult:
    """Run `code` in the sandbox, in a thread `on_thread` gives it (the episode loop keeps
    going): `EpisodeContext.sandboxed` in the workflow, at most one call per CPU."""
    # One trivial test: it passes only if the code itself ran without raising.
    run = await on_thread(run_tests, code, ("pass",), timeout_s=timeout_s)
    if run.timed_out:
        return ToolResult(f"Error: the code did not finish within {timeout_s:g} s.", True, True)
    output = run.output.replace("<solution>: ", "")
    failed = not all(run.passed)
    return ToolResult(output if output.strip() else "(no output)", failed, False)
