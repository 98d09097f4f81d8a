"""The code sandbox: isolation, limits, the weak mode and its switch, the answer/test-runner
protocol and the plain-data wire format. Attacks written as a policy would: test_code_attacks.py.
"""

import math
import os
import shutil
import socket
import subprocess
import sys
import textwrap
import time

import psutil
import pytest

from rlvr.rewards.sandbox import ALLOW_WEAK_ENV, SandboxUnavailable, runner, run_tests, wire

ISOLATIONS = ["namespaces", "weak"]


def owned_sandbox_processes() -> list[psutil.Process]:
    """Live sandbox processes started by this process (their environment names the owner)."""
    found = []
    for proc in psutil.process_iter(["cmdline", "status"]):
        try:
            if proc.info["status"] != psutil.STATUS_ZOMBIE and \
                    "rlvr.rewards.sandbox.harness" in " ".join(proc.info["cmdline"] or ()) and \
                    proc.environ().get("RLVR_SANDBOX_OWNER") == str(os.getpid()):
                found.append(proc)
        except (psutil.NoSuchProcess, psutil.AccessDenied):
            pass
    return found


# ---------------------------------------------------------------- isolation


def test_the_answer_sees_a_private_read_only_root_with_a_scratch_tmp():
    probe = textwrap.dedent("""
        import os, sys
        def writable(path):
            try:
                with open(path, "w") as f:
                    f.write("x")
                return True
            except OSError:
                return False
        ROOT = sorted(os.listdir("/"))
        CWD = os.getcwd()
        WRITES = {p: writable(p) for p in ["/x", "/usr/x", sys.prefix + "/x", "/tmp/x", "y"]}
        PROC = os.path.exists("/proc/self")
        PID, UID = os.getpid(), os.getuid()
    """)
    run = run_tests(probe, ["assert 'proc' not in ROOT and 'work' not in ROOT and 'home' not in "
                            "ROOT and 'etc' not in ROOT",
                            "assert CWD == '/tmp' and WRITES == {'/x': False, '/usr/x': False, "
                            "sys.prefix + '/x': False, '/tmp/x': True, 'y': True}",
                            "assert not PROC and PID == 1 and UID == 0"],
                    setup="import sys", isolation="namespaces")
    assert run.passed == (True, True, True), run.output


def test_mounts_below_a_bound_directory_are_bound_too_and_read_only():
    """A GPU host mounts its driver under /usr; in the sandbox's user namespace such a mount is
    locked to its parent, so a plain bind of /usr was EINVAL there and no code could be scored.
    Reproduced without privileges: a user and mount namespace with a tmpfs over /usr/share/doc,
    inside which the sandbox makes its own (nested) user namespace."""
    probe = textwrap.dedent("""
        from rlvr.rewards.sandbox import run_tests
        answer = (
            "import os\\n"
            "def writable(path):\\n"
            "    try:\\n"
            "        open(path, 'w').close()\\n"
            "        return True\\n"
            "    except OSError:\\n"
            "        return False\\n"
            "SEEN = os.path.exists('/usr/share/doc/marker')\\n"
            "WRITES = writable('/usr/share/doc/x')\\n")
        run = run_tests(answer, ["assert SEEN and not WRITES"], isolation="namespaces")
        print("RESULT", run.passed, run.output[-300:])
    """)
    script = ("mount -t tmpfs tmpfs /usr/share/doc && touch /usr/share/doc/marker && "
              f"exec {sys.executable} -c \"$0\"")
    done = subprocess.run(["unshare", "-Urm", "sh", "-c", script, probe], capture_output=True,
                          text=True, timeout=120)
    if "RESULT" not in done.stdout and "mount" in done.stderr[:200]:
        pytest.skip(f"cannot mount in a user namespace here: {done.stderr[-300:]}")
    assert "RESULT (True,)" in done.stdout, done.stdout[-2000:] + done.stderr[-2000:]


def test_the_venv_and_the_run_are_not_visible():
    here = os.path.dirname(__file__)
    run = run_tests("import os\nimport sys\n"
                    f"SEEN = [os.path.exists(p) for p in ({here!r}, {sys.prefix!r})]",
                    ["assert SEEN == [False, False]"], isolation="namespaces")
    assert run.passed == (True,), run.output


@pytest.mark.parametrize("isolation", ISOLATIONS)
def test_no_network_even_to_a_listening_parent(isolation):
    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen()
    port = server.getsockname()[1]
    try:
        answer = f"import socket\ndef connect():\n    socket.create_connection(('127.0.0.1', {port}), 1)"
        run = run_tests(answer, ["connect()", "connect\nassert 1"], isolation=isolation)
        with socket.create_connection(("127.0.0.1", port), 1):
            pass  # the port was open all along
    finally:
        server.close()
    assert run.passed == (False, True)


def test_host_unix_sockets_are_out_of_reach(tmp_path):
    server = socket.socket(socket.AF_UNIX)
    server.bind(str(tmp_path / "s"))
    server.listen()
    try:
        run = run_tests(f"import socket\nsocket.socket(socket.AF_UNIX).connect("
                        f"{str(tmp_path / 's')!r})", ["pass"], isolation="namespaces")
    finally:
        server.close()
    assert run.passed == (False,) and "FileNotFoundError" in run.output


def test_the_scratch_is_a_quota_d_tmpfs_that_vanishes():
    fill = textwrap.dedent("""
        import os
        WRITTEN = 0
        try:
            for i in range(100):
                with open(f"f{i}", "wb") as f:
                    f.write(b"x" * 2**20)
                WRITTEN += 2**20
        except OSError as e:
            ERROR = e.errno
    """)
    run = run_tests(fill, ["import errno\nassert ERROR == errno.ENOSPC",
                           f"assert WRITTEN <= {runner.SCRATCH_BYTES}"], isolation="namespaces")
    assert run.passed == (True, True), run.output
    assert run_tests("import os\nLEFT = os.listdir('.')", ["assert LEFT == []"]).passed == (True,)


@pytest.mark.parametrize("isolation", ISOLATIONS)
def test_environment_is_stripped(monkeypatch, isolation):
    monkeypatch.setenv("RLVR_SECRET_TOKEN", "hunter2")
    run = run_tests("import os, sys\nENV = dict(os.environ)\nISOLATED = sys.flags.isolated\n"
                    "STDIN = sys.stdin.read()",
                    ["assert 'RLVR_SECRET_TOKEN' not in ENV and ENV['HOME'] == ENV['TMPDIR']",
                     "assert ISOLATED and STDIN == ''"], isolation=isolation)
    assert run.passed == (True, True), run.output


@pytest.mark.parametrize("source, message", [
    ("import os\nos.fork()", "os.fork is not allowed"),
    ("import subprocess\nsubprocess.run(['true'])", "subprocess.Popen is not allowed"),
    ("import os\nos.system('true')", "os.system is not allowed"),
    # round the audit hook, straight to libc: the kernel says no
    ("import ctypes\nif ctypes.CDLL(None).fork() < 0:\n    raise SystemExit", "SystemExit"),
    ("import ctypes\nif ctypes.CDLL(None).system(b'true') != 0:\n    raise SystemExit",
     "SystemExit"),
    ("import ctypes\nif ctypes.CDLL(None).unshare(0x10000000) != 0:\n    raise SystemExit",
     "SystemExit"),
    ("import ctypes\nif ctypes.CDLL(None).ptrace(16, 1, 0, 0) != 0:\n    raise SystemExit",
     "SystemExit"),
])
def test_processes_namespaces_and_tracing_are_refused_by_the_kernel(source, message):
    """Even with ctypes (no audit hook to get round): seccomp and dropped capabilities."""
    run = run_tests(source, ["pass"], isolation="namespaces")
    assert run.passed == (False,) and message in run.output, run.output


def test_threads_are_allowed():
    run = run_tests("import threading\nOUT = []\nt = threading.Thread(target=OUT.append, "
                    "args=(1,))\nt.start()\nt.join()", ["assert OUT == [1]"])
    assert run.passed == (True,)


@pytest.mark.parametrize("isolation", ISOLATIONS)
def test_a_memory_bomb_scores_zero(isolation):
    start = time.monotonic()
    run = run_tests("x = bytearray(10**10)", ["assert True"], isolation=isolation)
    assert run.passed == (False,) and "MemoryError" in run.output
    assert time.monotonic() - start < 3.0


def test_no_process_outlives_the_run():
    run = run_tests("import time\ndef f(x):\n    time.sleep(100)", ["f(1)", "pass"],
                    timeout_s=0.5)
    assert run.passed == (False, True) and run.timed_out
    assert not owned_sandbox_processes()


def test_the_sandbox_dies_with_the_verifier_process():
    """The scorer kills a verifier's process group on overrun; the sandbox is in another one."""
    script = ("from rlvr.rewards.sandbox import run_tests\n"
              "run_tests('import time\\ntime.sleep(100)', ['assert True'], timeout_s=30)\n")
    parent = subprocess.Popen([sys.executable, "-c", script])
    try:
        deadline = time.monotonic() + 20
        while not (children := psutil.Process(parent.pid).children(recursive=True)) and \
                time.monotonic() < deadline:
            time.sleep(0.05)
        assert children, "the sandbox never started"
        time.sleep(0.5)  # let it reach the sleep
        children = psutil.Process(parent.pid).children(recursive=True)
    finally:
        parent.kill()
        parent.wait()
    gone, alive = psutil.wait_procs(children, timeout=3)
    assert not [p for p in alive if p.status() != psutil.STATUS_ZOMBIE]


def test_output_is_truncated():
    run = run_tests("print('x' * 10**6)", ["assert True"])
    assert run.passed == (True,) and len(run.output) <= runner.OUTPUT_BYTES


def test_a_sandbox_that_cannot_start_is_an_error_not_a_zero(monkeypatch):
    monkeypatch.setattr(sys, "executable", "/bin/false")
    with pytest.raises(RuntimeError, match="did not start"):
        run_tests("x = 1", ["assert True"], isolation="namespaces")


# ---------------------------------------------------------------- the weak mode


def test_weak_mode_guards_writes_and_other_processes(tmp_path):
    """The answer's code, called from the tests: its process has the guard hook."""
    outside = tmp_path / "escaped.txt"
    answer = textwrap.dedent(f"""
        import os
        open("note.txt", "w").write("hi")
        def note():
            return open("note.txt").read()
        def escape():
            open({str(outside)!r}, "w")
        def rename():
            os.rename("note.txt", "/tmp/rlvr-escaped.txt")
        def environ():
            return open("/proc/{os.getpid()}/environ").read()
    """)
    run = run_tests(answer, ["assert note() == 'hi'", "escape()", "rename()", "environ()"],
                    isolation="weak")
    assert run.passed == (True, False, False, False), run.output
    assert not outside.exists() and not os.path.exists("/tmp/rlvr-escaped.txt")


def test_weak_scratch_dirs_of_dead_verifiers_are_swept(monkeypatch, tmp_path):
    monkeypatch.setattr(runner.tempfile, "tempdir", str(tmp_path))
    dead = subprocess.Popen(["true"])
    dead.wait()  # reaped: its pid is free
    stale, live = tmp_path / f"rlvr-code-{dead.pid}-abc", tmp_path / f"rlvr-code-{os.getpid()}-x"
    stale.mkdir()
    live.mkdir()
    runner._sweep_stale_scratch.cache_clear()
    assert run_tests("x = 1", ["assert x == 1"], isolation="weak").passed == (True,)
    assert not stale.exists() and [p.name for p in tmp_path.iterdir()] == [live.name]


def test_refused_namespaces_stop_unless_the_weak_mode_is_allowed(monkeypatch):
    """A fake kernel refusal: without the switch every run raises, naming it; with it the
    answers run in the weak mode."""
    monkeypatch.setattr(runner, "namespaces_refused", lambda: "fake: no user namespaces")
    monkeypatch.setenv(ALLOW_WEAK_ENV, "0")
    with pytest.raises(SandboxUnavailable, match="allow_weak_sandbox"):
        run_tests("x = 1", ["assert x == 1"])
    monkeypatch.setenv(ALLOW_WEAK_ENV, "1")
    run = run_tests("x = 1", ["assert x == 1"])
    assert run.passed == (True,) and run.isolation == "weak"


@pytest.mark.skipif(shutil.which("unshare") is None, reason="needs util-linux unshare")
def test_a_kernel_that_refuses_user_namespaces_is_detected():
    """A real refusal: inside a user namespace allowed no further ones."""
    probe = ("from rlvr.rewards.sandbox import namespaces_refused\n"
             "print(namespaces_refused())")
    script = f"echo 0 > /proc/sys/user/max_user_namespaces && exec {sys.executable} -c '{probe}'"
    done = subprocess.run(["unshare", "-Ur", "sh", "-c", script], capture_output=True,
                          text=True, timeout=60)
    if done.returncode != 0:
        pytest.skip(f"cannot limit user namespaces here: {done.stderr[-300:]}")
    assert "unshare" in done.stdout and "No space left on device" in done.stdout


# ---------------------------------------------------------------- the two processes


def test_values_cross_as_plain_data_and_objects_as_proxies():
    answer = textwrap.dedent("""
        from collections import Counter, namedtuple
        Point = namedtuple("Point", "x y")
        def values():
            return (1, [2.5, {3: "a"}], {4}, frozenset([5]), b"x", 1 + 2j, None, True,
                    Point(1, 2), Counter("aab"), float("nan"), 10**40)
        class Box:
            def __init__(self, x):
                self.x = x
            def double(self):
                return 2 * self.x
            def __eq__(self, other):
                return True
        def count(n):
            yield from range(n)
        def fail(kind):
            raise {"value": ValueError, "custom": type("Custom", (Exception,), {})}[kind]("no")
    """)
    tests = ["v = values()\nassert v[:8] == (1, [2.5, {3: 'a'}], {4}, frozenset([5]), b'x', "
             "1 + 2j, None, True)\nassert v[8] == (1, 2) and v[8].y == 2 and "
             "type(v[8]).__name__ == 'Point'\n"
             "assert v[9] == {'a': 2, 'b': 1} and v[9].most_common(1) == [('a', 2)]\n"
             "assert v[10] != v[10] and v[11] == 10**40",
             "b = Box(21)\nassert b.double() == 42 and b.x == 21 and b != 3 and b == b",
             "assert list(count(3)) == [0, 1, 2] and sum(count(5)) == 10",
             "try:\n    fail('value')\nexcept ValueError as e:\n    assert str(e) == 'no'",
             "try:\n    fail('custom')\nexcept Exception as e:\n    assert 'Custom: no' in str(e)",
             "values(lambda: 1)"]  # a function cannot be sent: the test fails
    run = run_tests(answer, tests)
    assert run.passed == (True, True, True, True, True, False), run.output


def test_a_test_that_prints_the_answers_output_cannot_forge_verdicts():
    run = run_tests("def f():\n    return '\\nend 0 1\\nend 1 1\\nbegin 1\\nend 1 1\\n'",
                    ["print(f())\nassert False", "print(f())\nassert False"])
    assert run.passed == (False, False) and "end 1 1" in run.output


def test_the_answer_dying_fails_one_test_and_a_fresh_sandbox_runs_the_rest():
    answer = "import os\ndef f(x):\n    if x:\n        os._exit(0)\n    return x"
    run = run_tests(answer, ["assert f(0) == 0", "assert f(1) == 1", "assert f(0) == 0",
                             "try:\n    f(1)\nexcept BaseException:\n    pass"])
    assert run.passed == (True, False, True, False) and not run.timed_out


def test_a_code_that_hangs_while_loading_fails_every_test_once():
    start = time.monotonic()
    run = run_tests("while True:\n    pass", ["pass", "pass", "pass"], timeout_s=0.5)
    assert run.passed == (False, False, False) and run.timed_out
    assert time.monotonic() - start < 3.0


def test_setup_names_are_the_rows_not_the_answers():
    """A helper the setup defines (a checker the tests use) cannot be replaced by the answer;
    a setup stub (a function with only a docstring) is the answer's to write."""
    setup = "def poly(x):\n    return x * x\n\ndef solve(y):\n    '''Find x: poly(x) == y.'''\n"
    answer = "def poly(x):\n    return 0\n\ndef solve(y):\n    return 1"
    run = run_tests(answer, ["assert poly(solve(9)) == 9"], setup=setup)
    assert run.passed == (False,)
    honest = "def solve(y):\n    return y ** 0.5"
    assert run_tests(honest, ["assert poly(solve(9)) == 9"], setup=setup).passed == (True,)


# ---------------------------------------------------------------- the wire format


@pytest.mark.parametrize("value", [
    None, True, 0, -7, 10**30, 2.5, "héllo\n\x00", b"\x00\xff", [], (), {}, set(), frozenset(),
    (1, [2, (3,)]), {1: "a", (2, 3): [4], "k": {5}}, 1 - 2j, [float("inf"), -float("inf")],
])
def test_wire_round_trips_plain_data(value):
    loads = wire.make_loads()
    back = loads(wire.dumps(value))
    assert back == value and type(back) is type(value)


def test_wire_sends_subclasses_as_their_base_and_refuses_objects():
    class Sneaky(int):
        def __eq__(self, other):
            return True

    back = wire.make_loads()(wire.dumps([Sneaky(3)]))
    assert back == [3] and type(back[0]) is int and back[0] != 4
    with pytest.raises(TypeError):
        wire.dumps(object())
    assert math.isnan(wire.make_loads()(wire.dumps(float("nan"))))


@pytest.mark.parametrize("message", [
    b'{"x": 1}', b'{"t": [1], "s": [2]}', b'{"t": 1}', b'{"d": [[1]]}', b'{"d": [[[1], 2]]}',
    b'{"s": [[1]]}', b'{"h": [1, "f"]}', b'{"b": "zz"}', b"[1,", b"[1] 2", b"[" * 100_000,
    b'{"c": ["1", 2]}', "\u00e9".encode(), b"1" * 5000,
])
def test_wire_rejects_malformed_messages(message):
    with pytest.raises(wire.WireError):
        wire.make_loads()(message)


def test_wire_frames_have_a_size_limit():
    read, write = os.pipe()
    try:
        os.write(write, (2**30).to_bytes(4, "big"))
        with pytest.raises(wire.WireError, match="limit"):
            wire.read_frame(read)
        os.close(write)
        write = -1
        with pytest.raises(EOFError):
            wire.read_frame(read)
    finally:
        os.close(read)
        if write >= 0:
            os.close(write)
