"""The `ifeval` verifier: the fraction of a row's instruction constraints the answer meets, or 0
if it misses a gate (`GATES`: `rlvr:topic`, the answer names the task's topic).

A ground truth is JSON naming constraints by IFEval/IFBench id with their keyword arguments, in
any of three shapes, so rows from our generator, IFEval/IFBench files and open-instruct's data
load unchanged:

    [{"id": "punctuation:no_comma", "kwargs": {}}, ...]              # ours
    {"instruction_id": ["punctuation:no_comma", ...], "kwargs": [{}, ...]}   # open-instruct
    {"id": "punctuation:no_comma", "kwargs": {}}                        # a single constraint

Keyword arguments whose value is null are dropped: IFBench and open-instruct pad every row's
kwargs with every argument name any constraint takes, set to null.

Only the answer is judged (`strip_thinking`): a constraint met while thinking earns nothing, and
an empty answer meets no constraint, however vacuously it would pass ("no commas"): the IFEval
and IFBench harnesses and open-instruct's verifier all score an empty response 0. Empty means
no letter or digit (`format.has_letter_or_digit`), not just whitespace: "\\u200b", a Hangul
filler or a lone "." would otherwise meet every negative constraint of a row. Every check reads
the answer with invisible format characters removed (`text.visible_text`), so "w\u200bord" is one
word and "b\u200bad" the forbidden "bad", as a reader sees them.
Partial credit (the fraction met) rather than all-or-nothing gives a small model's group of
samples different rewards more often, which is what GRPO learns from.

A gate is not one more constraint in the fraction: the constraints check form, and an answer
that never does the task can meet them all (`constraints_topic`). So a missed gate scores 0,
and a met one earns nothing by itself: the score is the fraction of the *other* constraints
met (1 if the row has no other). A gate is an ordinary entry of the constraint list, so the
ground truth keeps its one shape.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from rlvr.rewards.format import has_letter_or_digit, strip_thinking
from rlvr.rewards.ifeval.constraints import check_kwargs, get_checker
from rlvr.rewards.ifeval.constraints_topic import TOPIC_ID
from rlvr.rewards.ifeval.text import visible_text
from rlvr.rewards.registry import register_verifier

# Constraints an answer must meet to score at all (module docstring).
GATES = frozenset({TOPIC_ID})


@dataclass(frozen=True)
class Constraint:
    """One instruction to check: its id (e.g. "keywords:existence") and the checker's kwargs."""

    id: str
    kwargs: dict[str, Any]

    def to_json(self) -> dict[str, Any]:
        return {"id": self.id, "kwargs": self.kwargs}


def constraints_to_ground_truth(constraints: list[Constraint]) -> str:
    """The ground truth string a data row carries for `constraints` (our list shape)."""
    return json.dumps([c.to_json() for c in constraints], ensure_ascii=False)


def parse_constraints(ground_truth: str) -> list[Constraint]:
    """The constraints of a ground truth, each checked: a known id, kwargs its checker takes.

    ValueError naming the constraint (by position and id) on anything unusable.
    """
    try:
        data = json.loads(ground_truth)
    except (ValueError, RecursionError) as e:
        raise ValueError(f"ifeval ground truth is not JSON ({e}): {ground_truth[:80]!r}") from None
    entries = _entries(data)
    if not entries:
        raise ValueError("ifeval ground truth lists no constraint")
    constraints = []
    for position, (constraint_id, kwargs) in enumerate(entries):
        where = f"ifeval constraint {position} ({constraint_id!r})"
        if not isinstance(constraint_id, str):
            raise ValueError(f"{where}: the id is not a string")
        if kwargs is None:
            kwargs = {}
        if not isinstance(kwargs, dict):
            raise ValueError(f"{where}: kwargs {kwargs!r} is not an object")
        kwargs = {name: value for name, value in kwargs.items() if value is not None}
        try:
            check_kwargs(constraint_id, kwargs)
        except ValueError as e:
            raise ValueError(f"{where}: {e}") from None
        constraints.append(Constraint(constraint_id, kwargs))
    return constraints


def _entries(data: Any) -> list[tuple[Any, Any]]:
    """(id, kwargs) pairs from any of the three accepted shapes."""
    if isinstance(data, dict) and "instruction_id" in data:
        ids, kwargs = data["instruction_id"], data.get("kwargs")
        if isinstance(ids, str):  # a single id written without its list
            ids, kwargs = [ids], [kwargs]
        if kwargs is None:
            kwargs = [{}] * len(ids) if isinstance(ids, list) else None
        if not isinstance(ids, list) or not isinstance(kwargs, list) or len(ids) != len(kwargs):
            raise ValueError("ifeval ground truth: 'instruction_id' and 'kwargs' must be lists "
                             "of the same length")
        return list(zip(ids, kwargs))
    if isinstance(data, dict):
        data = [data]
    if not isinstance(data, list):
        raise ValueError(f"ifeval ground truth must be a list of constraints, got {data!r:.80}")
    entries = []
    for position, entry in enumerate(data):
        if not isinstance(entry, dict) or "id" not in entry:
            raise ValueError(f"ifeval constraint {position} is not an object with an 'id': "
                             f"{entry!r:.80}")
        unknown = set(entry) - {"id", "kwargs"}
        if unknown:
            raise ValueError(f"ifeval constraint {position} ({entry['id']!r}) has unknown "
                             f"fields {sorted(unknown)}")
        entries.append((entry["id"], entry.get("kwargs")))
    return entries


def constraints_met(completion: str, constraints: list[Constraint]) -> list[bool]:
    """Whether the completion's answer meets each constraint, in order. Every checker reads the
    answer as a reader sees it (`text.visible_text`): invisible characters neither split nor
    glue words, sentences or keywords."""
    answer = visible_text(strip_thinking(completion))
    if not has_letter_or_digit(answer):  # says nothing, so meets no constraint (module docstring)
        return [False] * len(constraints)
    return [bool(get_checker(c.id)(answer, **c.kwargs)) for c in constraints]


@register_verifier("ifeval", ground_truth_check=parse_constraints)
def verify_ifeval(completion: str, ground_truth: str) -> float:
    """0 if the answer misses a gate, else the fraction of the other constraints it meets."""
    constraints = parse_constraints(ground_truth)
    met = constraints_met(completion, constraints)
    if not all(m for c, m in zip(constraints, met) if c.id in GATES):
        return 0.0
    graded = [m for c, m in zip(constraints, met) if c.id not in GATES]
    return sum(graded) / len(graded) if graded else 1.0
