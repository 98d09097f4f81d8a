"""The examples in README.md and docs/ work: every `rlvr train|config|launch|eval|serve` command
on a shipped config (in a shell block, an indented block or inline code) names a config that
loads and validates with its overrides (no training), and every Python block runs, each in a
fresh interpreter in a scratch directory (the README's trains the tiny config).

A Python block that cannot run on its own (it reads a finished run's files) is marked on the
line before its fence with `<!-- docs-test: compile only (why) -->`: it is then compiled, not
run."""

from __future__ import annotations

import os
import re
import shlex
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest

from rlvr.run.input_checks import check_registered_names
from rlvr.config import load_config

ROOT = Path(__file__).resolve().parents[2]
GENERATED = {ROOT / "docs" / "reference" / "config.md"}
COMMANDS = ("train", "config", "launch", "eval", "serve")
COMPILE_ONLY = "<!-- docs-test: compile only"


def doc_files() -> list[Path]:
    pages = sorted(p for p in (ROOT / "docs").rglob("*.md") if p not in GENERATED)
    return [ROOT / "README.md", *pages]


@dataclass(frozen=True)
class Block:
    path: Path
    line: int  # 1-based line of the fence
    lang: str
    text: str
    compile_only: bool

    def __str__(self) -> str:
        return f"{self.path.relative_to(ROOT)}:{self.line}"


def fenced_blocks(path: Path) -> list[Block]:
    lines = path.read_text(encoding="utf-8").splitlines()
    out, i = [], 0
    while i < len(lines):
        m = re.match(r"^(\s*)(```+|~~~+)\s*([\w+-]*)", lines[i])
        if not m:
            i += 1
            continue
        indent, fence, lang = m.group(1), m.group(2), m.group(3).lower()
        start, body = i, []
        i += 1
        while i < len(lines) and not lines[i].strip().startswith(fence):
            body.append(lines[i][len(indent):] if lines[i].startswith(indent) else lines[i])
            i += 1
        marked = start > 0 and lines[start - 1].strip().startswith(COMPILE_ONLY)
        out.append(Block(path, start + 1, lang, "\n".join(body), marked))
        i += 1
    return out


def command_lines(path: Path) -> list[tuple[str, str]]:
    """(where, command) for every rlvr command on a shipped config: in shell blocks (fenced, or
    indented lines that start with a command; continuation lines joined) and in inline code."""
    rel = path.relative_to(ROOT)
    candidates = []
    for block in fenced_blocks(path):
        if block.lang in ("", "bash", "sh", "shell", "console"):
            candidates += _joined(block.text.splitlines(), block.line + 1, rel)
    lines = path.read_text(encoding="utf-8").splitlines()
    fence_lines = {n for b in fenced_blocks(path)
                   for n in range(b.line, b.line + b.text.count("\n") + 2)}
    indented = [(n, line) if n not in fence_lines and line.startswith("    ") else (n, "")
                for n, line in enumerate(lines, 1)]
    command_start = re.compile(r"^\s{4,}([A-Z_]+=\S+\s+)*(\.venv/bin/)?rlvr\s")
    i = 0
    while i < len(indented):
        n, line = indented[i]
        if command_start.match(line):
            group = [line]
            while group[-1].rstrip().endswith("\\") and i + 1 < len(indented):
                i += 1
                group.append(indented[i][1])
            candidates += _joined(group, n, rel)
        i += 1
    for n, line in enumerate(lines, 1):
        if n in fence_lines:
            continue
        for span in re.findall(r"`([^`\n]+)`", line):
            if re.match(r"^([A-Z_]+=\S+\s+)*(\.venv/bin/)?rlvr\s", span):
                candidates.append((f"{rel}:{n}", span))
    return [(w, c) for w, c in candidates if _is_shipped_config_command(c)]


def _joined(lines: list[str], first: int, rel: Path) -> list[tuple[str, str]]:
    """Shell lines with their continuations joined, each with where it starts."""
    out, current, start = [], "", first
    for n, line in enumerate(lines, first):
        if not current:
            start = n
        current += " " + line.strip()
        if current.endswith("\\"):
            current = current[:-1]
            continue
        out.append((f"{rel}:{start}", current.strip()))
        current = ""
    return out


def _is_shipped_config_command(command: str) -> bool:
    return (re.search(r"(^|[\s/])rlvr(\.cli)?\s+(" + "|".join(COMMANDS) + r")\b", command)
            is not None and re.search(r"configs/[\w/.-]+\.yaml", command) is not None)


def parse_command(command: str) -> tuple[list[str], list[str]]:
    """The YAML files and overrides an `rlvr` command line loads, as the CLI would."""
    tokens = shlex.split(command, comments=True)
    while tokens and re.match(r"^[A-Z_][A-Z0-9_]*=", tokens[0]):  # VAR=value prefixes
        tokens.pop(0)
    while tokens and not re.search(r"(^|/)rlvr(\.cli)?$", tokens[0]):
        tokens.pop(0)  # python -m, flock, ...
    cmd, rest = tokens[1], tokens[2:]
    extra = []
    if cmd == "launch":
        extra.append(f"distributed.launcher={rest.pop(0)}")
    if cmd in ("eval", "serve"):
        extra.append(f"model.name_or_path={rest.pop(0)}")
    items, skip = [], False
    for token in rest:
        if skip:
            skip = False
        elif token in ("--output", "--host", "--port", "--log", "--startup-timeout"):
            skip = True
        elif token.startswith("--") or token == "...":
            continue
        else:
            items.append(token)
    yamls = [t for t in items if "=" not in t]
    overrides = [t for t in items if "=" in t]
    if cmd in ("eval", "serve"):  # the model given wins over the config's, as in the CLI
        return yamls, overrides + extra
    return yamls, overrides + extra


def _all_commands() -> list[tuple[str, str]]:
    return [c for path in doc_files() for c in command_lines(path)]


def _python_blocks() -> list[Block]:
    return [b for path in doc_files() for b in fenced_blocks(path) if b.lang in ("python", "py")]


def test_the_docs_hold_commands_and_python_examples_to_check():
    # The collectors find what they should: a change that hid every example from them would
    # otherwise pass silently.
    commands = _all_commands()
    assert any(c.strip().endswith("rlvr train configs/quickstart.yaml") for _, c in commands)
    assert len(commands) >= 20
    assert any(str(b).startswith("README.md") for b in _python_blocks())


@pytest.mark.parametrize("where,command", _all_commands())
def test_a_documented_command_on_a_shipped_config_validates(where, command, monkeypatch):
    monkeypatch.chdir(ROOT)
    yamls, overrides = parse_command(command)
    for y in yamls:
        assert (ROOT / y).is_file(), f"{where}: {y} does not exist ({command})"
    cfg = load_config(yamls, overrides)  # raises ConfigError naming the field
    check_registered_names(cfg)


def test_make_train_runs_a_shipped_config_that_validates(monkeypatch):
    monkeypatch.chdir(ROOT)
    makefile = (ROOT / "Makefile").read_text(encoding="utf-8")
    config = re.search(r"^CONFIG \?= (\S+)", makefile, re.M).group(1)
    check_registered_names(load_config(config))


@pytest.mark.parametrize("block", _python_blocks(), ids=str)
def test_a_python_example_runs(block, tmp_path):
    code = compile(block.text, str(block), "exec")  # a syntax error fails every block
    if block.compile_only:
        return
    del code
    (tmp_path / "configs").symlink_to(ROOT / "configs")  # examples name configs/ and write runs/
    (tmp_path / "examples").symlink_to(ROOT / "examples")
    script = tmp_path / "example.py"
    script.write_text(block.text, encoding="utf-8")
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(
        p for p in [str(tmp_path), os.environ.get("PYTHONPATH", "")] if p)}
    done = subprocess.run([sys.executable, str(script)], cwd=tmp_path, env=env,
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, f"{block}:\n{done.stdout[-2000:]}\n{done.stderr[-4000:]}"


def test_the_workflow_example_on_its_page_is_the_shipped_one():
    # docs/workflows.md shows examples/workflows/self_check.py's code (less its docstring); the
    # file is what `rollout.workflow=examples.workflows.self_check:self_check` runs.
    (block,) = [b for b in fenced_blocks(ROOT / "docs" / "workflows.md") if b.lang == "python"]
    shipped = (ROOT / "examples" / "workflows" / "self_check.py").read_text(encoding="utf-8")
    code = shipped[shipped.index("from rlvr.types import"):]
    assert block.text.strip() == code.strip()
