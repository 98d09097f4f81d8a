"""Procedural tasks generated from a seed: easy enough that SmolLM2-135M gets partial credit,
so group rewards vary and GRPO has something to learn (see NOTES: single-digit addition gives
a mean reward of about 0.2 at temperature 1 with most groups informative).

The problem space is small (100 additions), so train and test share problems; the task measures
a skill, not recall. The two splits differ in order (different seeds).
"""

from __future__ import annotations

import random
from typing import Callable

from rlvr.data.errors import Example

NUM_ROWS = {"train": 2000, "test": 200}


def _arithmetic(name: str, symbol: str, op: Callable[[int, int], int],
                a_range: tuple[int, int] = (0, 9), b_range: tuple[int, int] = (0, 9)):
    def load(split: str, seed: int) -> list[Example]:
        rng = random.Random(f"{name}/{split}/{seed}")
        out = []
        for i in range(NUM_ROWS.get(split, 200)):
            a, b = rng.randint(*a_range), rng.randint(*b_range)
            prompt = f"What is {a} {symbol} {b}? Answer with just the number."
            out.append(Example(id=f"{name}/{i}", messages=({"role": "user", "content": prompt},),
                               ground_truth=str(op(a, b)), verifiers=("last_number",),
                               source=name))
        return out

    return load


def _long_multiplication(split: str, seed: int) -> list[Example]:
    """Two digits by one: SmolLM2-135M gets some right in its head (so groups vary), and all
    with one line of Python (`rollout.workflow=tool_use`); the prompt says the tool is there."""
    rng = random.Random(f"long_multiplication/{split}/{seed}")
    out = []
    for i in range(NUM_ROWS.get(split, 200)):
        a, b = rng.randint(12, 99), rng.randint(3, 9)
        prompt = (f"What is {a} * {b}? You can run Python: write a ```python code block and "
                  "its output will be shown to you. Then answer with just the number.")
        out.append(Example(id=f"long_multiplication/{i}",
                           messages=({"role": "user", "content": prompt},),
                           ground_truth=str(a * b), verifiers=("last_number",),
                           source="long_multiplication"))
    return out


PROCEDURAL_TASKS = {
    "long_multiplication": _long_multiplication,
    "addition": _arithmetic("addition", "+", lambda a, b: a + b),
    "multiplication": _arithmetic("multiplication", "*", lambda a, b: a * b),
    # Two digits by one, in the head: the stage between addition and GSM8K, where SmolLM2-135M
    # starts right on a minority of problems (616 distinct ones).
    "multiplication_2x1": _arithmetic("multiplication_2x1", "*", lambda a, b: a * b,
                                      a_range=(12, 99), b_range=(3, 9)),
}
