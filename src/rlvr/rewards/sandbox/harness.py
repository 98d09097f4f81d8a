"""The program a sandbox runs: a test runner, and the answer's process forked from it.

Two processes, so that the verdict is out of the answer's reach:
- the answer's process runs the row's setup and the answer's code, then serves requests: "give
  me your global `add`", "call it with (1, 2)". It returns values as plain data (`wire`), and
  objects that are not data (functions, instances, generators) as handles.
- the test runner runs the row's setup and the tests, with the names the tests take from the
  answer (the entry point; names the answer defines that neither the setup, the builtins nor an
  earlier test do) bound to proxies; a module the tests read without importing it (MBPP-style
  lists use `math` so) is imported here, never taken from the answer (`TestRunner.run_test`). `assert add(1, 2) == 3` then runs here: `add(1, 2)` is a request, `== 3`
  compares builtins in this process. The runner reports "begin i" / "end i 1|0" to the parent.

The answer's process is forked before the runner reads the tests, so they are never in its
memory; it is the init of a PID namespace the runner is outside of, in a session of its own,
with no capabilities and a seccomp filter that lets it signal only itself, so it can neither
see, signal nor trace the runner; the runner's pipes to the parent are closed in it. It runs
nothing of the answer before the runner is confined and says "ready", dies with the runner (a
parent-death signal it may not clear), and is killed and reaped by the runner before the
verdict is out.
Walking frames, patching builtins, `os._exit(0)` or writing look-alike lines change nothing
but the answer's own replies. An answer that dies or hangs fails the test it was in; the parent
restarts the sandbox for the tests after it (`runner`).

Runs inside the sandbox (sent as compiled code): standard library and its sibling modules only.
"""

from __future__ import annotations

import builtins
import marshal
import os
import sys

from rlvr.rewards.sandbox import confine
from rlvr.rewards.sandbox.names import MISSING, answer_imports, global_names, is_stub, real_import
from rlvr.rewards.sandbox.wire import (LIMIT, WireError, dumps, make_loads, read_frame,
                                       write_frame)

_ERROR_CHARS = 1000


def main(config: dict, read) -> None:
    """The test runner's whole life. `read(n)` reads n bytes of stdin exactly."""
    weak = config["isolation"] == "weak"
    # The verdict line moves off fd 1: a test's print() (of what the answer returned, say)
    # must land in the output, never among the verdicts.
    _Verdicts.fd = os.dup(1)
    os.dup2(2, 1)
    try:
        if not weak:
            sources = confine.enter_namespaces(config["read_only"], config["devices"])
            confine.build_root(sources, config["read_only"], config["links"],
                               config["devices"], config["masked"], config["scratch_bytes"],
                               config["scratch_inodes"])
        confine.die_with_parent(config["parent_pid"])  # after any change of uid, which clears it
        confine.set_undumpable()
        requests_r, requests_w = os.pipe()
        replies_r, replies_w = os.pipe()
        go_r, go_w = os.pipe()  # the answer's process waits on it: nothing runs before "ready"
        runner_pid = os.getpid()
        pid = os.fork()
    except (confine.ConfinementError, OSError) as e:
        _say(f"unconfined {str(e)[:400]}")
        os._exit(0)
    if pid == 0:
        _answer_process(config, requests_r, replies_w, go_r, runner_pid)
    for fd in (requests_r, replies_w, go_r):
        os.close(fd)
    try:
        confine.drop_privileges(required=not weak)
        confine.install_seccomp(signal_targets=(pid,))
        confine.set_limits(config["memory_bytes"], config["file_bytes"], config["cpu_s"],
                           config["tasks"])
        if weak:  # the tests are the row's, not the answer's; guarded all the same
            confine.install_guard_hook(os.path.realpath(os.getcwd()), tuple(config["masked"]))
    except (confine.ConfinementError, OSError) as e:
        _say(f"unconfined {str(e)[:400]}")
        os._exit(0)
    _say("ready")
    # Only now does the answer's code run: whatever it does, the runner has started, and a
    # runner it kills or starves from here on fails its tests (a 0), never a host fault.
    os.write(go_w, b"g")
    os.close(go_w)
    tests = marshal.loads(read(int.from_bytes(read(4), "big")))  # only now: see the docstring
    runner = TestRunner(Channel(requests_w, replies_r), config["setup"], config["entry_point"],
                        answer_imports(config["code"]))
    loaded = runner.wait_loaded()
    _say(f"loaded {int(loaded)}")
    if loaded:
        for index, source in tests:
            _say(f"begin {index}")
            passed = runner.run_test(source, f"<test {index}>")
            _flush()
            for reason in runner.limits:
                _say(f"limit {index} {reason}")
            runner.limits.clear()
            _say(f"end {index} {int(passed)}")
            if runner.channel.dead:
                _say("dead")
                break
    # The answer's process (and, as the init of its PID namespace, all it started) ends here,
    # before the verdict is out; killed with us all the same (its parent-death signal).
    os.kill(pid, 9)
    os.waitpid(pid, 0)
    os._exit(0)


class _Verdicts:
    fd = 1  # the runner's line to the parent (a copy of its original stdout)


def _say(line: str) -> None:
    """A line to the parent, on a descriptor the answer's process does not hold."""
    os.write(_Verdicts.fd, (line + "\n").encode())


def _complain(text: str) -> None:
    try:
        os.write(2, (text[:_ERROR_CHARS] + "\n").encode("utf-8", "replace"))
    except OSError:
        pass


# ---------------------------------------------------------------- the answer's side


def _answer_process(config: dict, requests_fd: int, replies_fd: int, go_fd: int,
                    runner_pid: int) -> None:
    weak = config["isolation"] == "weak"
    try:
        confine.die_with_parent(runner_pid if weak else 0)  # in its PID namespace the parent is 0
        os.setsid()  # out of the runner's process group: kill(0, ...) reaches only itself
        null = os.open("/dev/null", os.O_RDWR)
        os.dup2(null, 0)  # stdin held the tests, unread
        keep = sorted({0, 1, 2, requests_fd, replies_fd, go_fd})
        for low, high in zip(keep, keep[1:] + [os.sysconf("SC_OPEN_MAX")]):
            os.closerange(low + 1, high)
        confine.drop_privileges(required=not weak)
        confine.set_limits(config["memory_bytes"], config["file_bytes"], config["cpu_s"],
                           config["tasks"])
        confine.install_seccomp()
        confine.install_guard_hook(os.path.realpath(os.getcwd()) if weak else None,
                                   tuple(config["masked"]) if weak else ())
        go = os.read(go_fd, 1)  # b"" if the runner died first: then nothing of the answer runs
        os.close(go_fd)
    except BaseException as e:  # noqa: BLE001  nothing of the answer has run yet
        _complain(f"sandbox: the answer's process could not be confined: {e}")
        os._exit(71)
    if go != b"g":
        os._exit(72)
    AnswerServer(requests_fd, replies_fd).serve(config["setup"], config["code"],
                                                config["entry_point"])
    os._exit(0)


class AnswerServer:
    """Loads the answer, then answers requests until the runner closes the pipe. Everything
    here is in the answer's reach, and nothing here is trusted: the runner checks every reply."""

    def __init__(self, requests_fd: int, replies_fd: int):
        self.requests_fd, self.replies_fd = requests_fd, replies_fd
        self.objects: dict[int, object] = {}  # handle -> object the runner holds a proxy of
        self.loads = make_loads(lambda handle, _label: self.objects[handle])
        self.namespace: dict = {"__name__": "__main__", "__builtins__": builtins}

    def serve(self, setup: str, code: str, entry_point: str | None) -> None:
        names = self.load(setup, code, entry_point)
        self.reply(0, "ok", names)
        while True:
            try:
                request = self.loads(read_frame(self.requests_fd))
            except (EOFError, WireError):
                return
            number, op, *args = request
            try:
                result = self.handle(op, args)
            except StopIteration:
                # The end of an iteration the runner asked to step ("next"), the one place it
                # is not an error; raised anywhere else it is reported as the error it is.
                if op == "next":
                    self.reply(number, "stop")
                else:
                    self.reply(number, "raise", "StopIteration", "")
            except BaseException as e:  # noqa: BLE001  the answer's exception, for the runner
                self.reply(number, "raise", type(e).__name__, _describe(e))
            else:
                self.reply(number, "ok", result)
            _flush()

    def load(self, setup: str, code: str, entry_point: str | None) -> list[str] | None:
        """The names the answer's code defined or changed; None if setup or code failed."""
        if not _run(setup, "<setup>", self.namespace):
            return None
        before = {name: id(value) for name, value in self.namespace.items()}
        ok = _run(code, "<solution>", self.namespace)
        _flush()
        if ok and entry_point and entry_point not in self.namespace:
            _complain(f"the code does not define {entry_point}")
            ok = False
        if not ok:
            return None
        return [name for name, value in self.namespace.items()
                if type(name) is str and before.get(name) != id(value)]

    def handle(self, op: str, args: list):
        if op == "get":
            if args[0] not in self.namespace:
                raise NameError(f"name {args[0]!r} is not defined")
            return self.namespace[args[0]]
        if op == "call":
            target, positional, keywords = args
            return target(*positional, **keywords)
        if op == "getattr":
            return getattr(args[0], args[1])
        if op == "iter":
            return iter(args[0])
        if op == "next":
            return next(args[0])
        raise ValueError(f"unknown request {op!r}")

    def reply(self, number: int, *message) -> None:
        try:
            body = dumps([number, *message], self.keep)
        except (TypeError, ValueError, RecursionError, MemoryError) as e:
            body = dumps([number, "raise", "TypeError", f"the answer's value cannot be returned: "
                                                        f"{_describe(e)}"])
        write_frame(self.replies_fd, body)

    def keep(self, value) -> dict:
        """A handle for an object that is not data: the runner gets a proxy of it."""
        handle = len(self.objects) + 1
        self.objects[handle] = value
        return {"h": [handle, type(value).__name__[:100]]}


def _run(source: str, name: str, namespace: dict) -> bool:
    try:
        exec(compile(source, name, "exec", dont_inherit=True), namespace)
        return True
    except BaseException as e:  # noqa: BLE001  SystemExit too: exiting early is failing
        _complain(f"{name}: {type(e).__name__}: {_describe(e)}")
        return False


def _describe(e: BaseException) -> str:
    try:
        return str(e)[:_ERROR_CHARS]
    except BaseException:  # noqa: BLE001  an exception that cannot print itself
        return "<unprintable>"


def _flush() -> None:
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except BaseException:  # noqa: BLE001  the answer may have replaced or closed them
            pass


# ---------------------------------------------------------------- the runner's side


class AnswerGone(BaseException):
    """The answer's process died, hung up or broke the protocol. A BaseException, so a test's
    `except Exception:` cannot take it for an answer's error and pass."""


class AnswerError(Exception):
    """An exception the answer raised whose type is not a builtin one."""


class Remote:
    """A proxy of an object in the answer's process: calls, attribute reads and iteration are
    requests; `==` is identity (the answer's `__eq__` never runs here)."""

    __slots__ = ("_channel", "_handle", "_label")

    def __init__(self, channel: "Channel", handle: int, label: str):
        self._channel, self._handle, self._label = channel, handle, label

    def __call__(self, *args, **kwargs):
        return self._channel.request("call", self, list(args), kwargs)

    def __getattr__(self, name: str):
        if name.startswith("__") and name.endswith("__"):  # copy, pickle, inspect probing
            raise AttributeError(name)
        return self._channel.request("getattr", self, name)

    def __iter__(self):
        iterator = self._channel.request("iter", self)
        while True:
            try:
                yield self._channel.request("next", iterator)
            except _Exhausted:
                return

    def __repr__(self) -> str:
        return f"<the answer's {self._label}>"


class Channel:
    """The runner's end of the request/reply pipes."""

    def __init__(self, requests_fd: int, replies_fd: int):
        self.requests_fd, self.replies_fd = requests_fd, replies_fd
        self.number = 0
        self.dead = False
        self.loads = make_loads(lambda handle, label: Remote(self, handle, label))

    def receive(self, number: int):
        """The reply to request `number` as ("ok", value) or ("raise", type, message)."""
        if self.dead:
            raise AnswerGone("the answer's process is gone")
        try:
            reply = self.loads(read_frame(self.replies_fd))
        except (EOFError, OSError, WireError) as e:
            self.dead = True
            raise AnswerGone(f"the answer's process is gone ({e})") from None
        if type(reply) is not list or len(reply) < 2 or reply[0] != number or \
                reply[1] not in ("ok", "raise", "stop") or (reply[1] == "ok" and len(reply) != 3) \
                or (reply[1] == "raise" and len(reply) != 4) or \
                (reply[1] == "stop" and len(reply) != 2):
            self.dead = True
            raise AnswerGone("the answer's process broke the protocol")
        return reply[1:]

    def request(self, op: str, *args):
        if self.dead:
            raise AnswerGone("the answer's process is gone")
        self.number += 1
        body = dumps([self.number, op, *args], _send_handle)  # TypeError: not data
        try:
            write_frame(self.requests_fd, body)
        except OSError:
            self.dead = True
            raise AnswerGone("the answer's process is gone") from None
        outcome = self.receive(self.number)
        if outcome[0] == "ok":
            return outcome[1]
        if outcome[0] == "raise":
            raise _exception(outcome[1], outcome[2])
        if op == "next":  # "stop": the iterator is exhausted
            raise _Exhausted
        self.dead = True
        raise AnswerGone("the answer's process broke the protocol")


class _Exhausted(Exception):
    """The answer's iterator is exhausted (a "next" request's "stop"): private to `Remote`, so
    nothing the answer raises can end an iteration the tests run (see `_exception`)."""


def _send_handle(value) -> dict:
    if isinstance(value, Remote):
        return {"h": [value._handle, ""]}
    raise TypeError(f"a {type(value).__name__} cannot be passed to the answer (only data)")


# Builtin exceptions that steer the code around them rather than report an error: a
# StopIteration raised by the answer's function inside `all(map(f, xs))` would end the map there
# and make the test pass whatever `f` computes.
_CONTROL_FLOW = (StopIteration, StopAsyncIteration)


def _exception(type_name, message) -> Exception:
    """The answer's exception, rebuilt here: a builtin type by name, else AnswerError (which
    the control-flow ones become too)."""
    message = str(message)[:_ERROR_CHARS] if type(message) is str else "?"
    cls = builtins.__dict__.get(type_name) if type(type_name) is str else None
    if isinstance(cls, type) and issubclass(cls, Exception) and \
            not issubclass(cls, _CONTROL_FLOW):
        try:
            return cls(message)
        except Exception:  # noqa: BLE001  a type that wants other arguments
            pass
    return AnswerError(f"{str(type_name)[:100]}: {message}")


class TestRunner:
    """Runs the tests here, with the answer's names bound to proxies."""

    __test__ = False  # not a pytest class

    def __init__(self, channel: Channel, setup: str, entry_point: str | None,
                 imports: dict[str, tuple[str, str | None]] | None = None):
        self.channel = channel
        self.entry_point = entry_point
        self.namespace: dict = {"__name__": "__main__", "__builtins__": builtins}
        self.answer_names: set[str] = set()
        # Names bound to the answer's values, with the value bound: fetched again for each test
        # that reads them (the answer's globals change as its functions run), until a test
        # assigns the name itself.
        self.from_answer: dict[str, object] = {}
        self.setup = setup
        self.imports = imports or {}  # `answer_imports` of the answer's source
        self.limits: list[str] = []  # the wire's limits the last test ran into, named

    def wait_loaded(self) -> bool:
        """Whether setup and code ran in the answer's process; binds the entry point."""
        try:
            status, names = self.channel.receive(0)
        except (AnswerGone, ValueError):
            return False
        if status != "ok" or type(names) is not list or \
                not all(type(n) is str for n in names):
            return False
        self.answer_names = set(names)
        if not _run(self.setup, "<setup>", self.namespace):
            return False
        if self.entry_point:
            return self._bind(self.entry_point)
        return True

    def run_test(self, source: str, name: str) -> bool:
        try:
            code = compile(source, name, "exec", dont_inherit=True)
        except (SyntaxError, ValueError) as e:
            _complain(f"{name}: {type(e).__name__}: {e}")
            return False
        for wanted in sorted(global_names(code) & self.answer_names):
            # What the setup, an earlier test or an earlier binding put here stays (a setup's
            # stub is the one thing the answer's version replaces): a test's `expected = ...`
            # or the setup's helper is never swapped for the answer's object.
            held = self.namespace.get(wanted, MISSING)
            if wanted in builtins.__dict__ or wanted == self.entry_point or \
                    (held is not MISSING and not is_stub(held) and
                     wanted not in self.from_answer):
                continue
            if not self._bind(wanted):
                return False
        try:
            exec(code, self.namespace)
            passed = True
        except BaseException as e:  # noqa: BLE001  AnswerGone, AssertionError, anything
            text = _describe(e)
            _complain(f"{name}: {type(e).__name__}: {text}")
            if LIMIT in text:  # a documented limit, not the answer's fault: said, not silent
                self.limits.append(text[text.index(LIMIT) + len(LIMIT):][:200])
            passed = False
        for bound, value in list(self.from_answer.items()):  # the test assigned it: its own now
            if self.namespace.get(bound, MISSING) is not value:
                del self.from_answer[bound]
        return passed and not self.channel.dead

    def _bind(self, name: str) -> bool:
        """Bind `name` for the tests: a module (or a name imported from one) imported here,
        else a proxy of the answer's object. False when neither can be had."""
        if name != self.entry_point and (real := real_import(name, self.imports)) is not None:
            if real is MISSING:
                _complain(f"the tests use {name!r}, which cannot be imported here")
                return False
            self.namespace[name] = real
            return True
        try:
            self.namespace[name] = self.from_answer[name] = self.channel.request("get", name)
            return True
        except AnswerGone:
            return False
        except Exception:  # noqa: BLE001  NameError: the answer has no such name
            return False
