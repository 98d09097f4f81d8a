"""The code sandbox: run an answer's Python against a row's tests so that the answer cannot reach
the verdict, the tests or the host.

- `runner`: the parent's side. Starts a sandbox per answer, gives each test its own time
  limit, restarts the sandbox after a test that hung or killed the answer's process.
- `harness`: what runs inside. A test runner and the answer's process, two processes: the
  tests run in the runner, calling the answer's functions by request and comparing plain data.
- `names`: which names the tests take from the answer, and what each is bound to (a module is
  imported in the runner, never the answer's).
- `confine`: how the sandbox isolates itself (namespaces, a read-only private root with a quota'd
  scratch, no capabilities, seccomp, rlimits), or, in the weak mode, guards itself.
- `wire`: the plain-data format between the two processes.

See docs/sandbox.md for what it isolates, what it needs from the kernel, and what it does not
promise.
"""

from rlvr.rewards.sandbox.runner import (ALLOW_WEAK_ENV, DEFAULT_TIMEOUT_S, MAX_TIMEOUT_S,
                                         OUTPUT_BYTES, SandboxRun, SandboxUnavailable,
                                         namespaces_refused, run_tests, weak_allowed)

__all__ = ["ALLOW_WEAK_ENV", "DEFAULT_TIMEOUT_S", "MAX_TIMEOUT_S", "OUTPUT_BYTES", "SandboxRun",
           "SandboxUnavailable", "namespaces_refused", "run_tests", "weak_allowed"]
