"""The inference servers a run asks for (`rollout.engine=remote` with no addresses given):
started before training, healthy before the first request, stopped on every way out.

What it is: `LocalServers` (N servers as child processes of this one), started with
`server_settings` (`rlvr.serving.settings`: a config's rollout section as `ServerSettings`, so
`rlvr serve`, every launcher and a Slurm step start identical servers).
What it is not: the remote engine that uses them (`rlvr.rollout.remote.engine`).

Every way out stops them: a normal end, an error, SIGINT/SIGTERM (the trainer turns the first
into a clean stop, and `LocalServers.__exit__` runs), and the launcher dying outright (SIGKILL,
a second signal): each server is started with a parent-death signal, so the kernel sends it
SIGTERM when the process that started it ends. That signal fires when the starting *thread*
ends, so servers are always started from the thread that owns the `LocalServers`.

Every server binds 127.0.0.1 (the trainer is on this host) and requires the run's key on every
route (`rlvr.serving.guard`); it reloads weights only from `<output_dir>/weight_updates`.
"""

from __future__ import annotations

import ctypes
import logging
import signal
import time
from dataclasses import replace
from pathlib import Path

from rlvr.serving.auth import new_key
from rlvr.serving.server import ServerProcess, ServerSettings, ServerStartError
from rlvr.serving.settings import server_settings  # noqa: F401  (launchers import it here)

log = logging.getLogger(__name__)


def _die_with_parent() -> None:
    """In the child, before exec: SIGTERM when the parent (thread) that started it ends."""
    PR_SET_PDEATHSIG = 1
    try:
        ctypes.CDLL("libc.so.6", use_errno=True).prctl(PR_SET_PDEATHSIG, signal.SIGTERM)
    except OSError:  # not Linux: the context manager's stop is the only guard
        pass


class LocalServers:
    """`count` servers on this host, on consecutive ports from `first_port` (0: free ports),
    logs in `log_dir/server_<i>.log`, all requiring `key` (the run's, `prepare_run_key`; None:
    a fresh one, `.key`). A context manager: entered, every server is healthy; left, every
    server is stopped."""

    def __init__(self, settings: ServerSettings, count: int, log_dir: Path,
                 first_port: int = 0, startup_timeout_s: float = 600.0,
                 visible_devices: list[str] | None = None, key: str | None = None):
        self.key = key or new_key()
        self.processes = [
            ServerProcess(replace(settings, port=first_port + i if first_port else 0,
                                  visible_devices=(visible_devices or [""] * count)[i]),
                          log_path=Path(log_dir) / f"server_{i}.log", preexec_fn=_die_with_parent,
                          key=self.key)
            for i in range(count)]
        self.startup_timeout_s = startup_timeout_s

    @property
    def addresses(self) -> list[str]:
        return [p.address for p in self.processes]

    def __enter__(self) -> "LocalServers":
        start = time.perf_counter()
        try:
            for p in self.processes:  # all at once: they start concurrently
                p.launch()
            for p in self.processes:
                p.wait_healthy(self.startup_timeout_s - (time.perf_counter() - start))
        except BaseException:
            self.stop()
            raise
        log.info("%d inference servers healthy after %.0f s: %s", len(self.processes),
                 time.perf_counter() - start, ", ".join(self.addresses))
        return self

    def __exit__(self, *exc) -> None:
        self.stop()

    def stop(self) -> None:
        for p in self.processes:
            p.stop()

    def dead(self) -> list[str]:
        """Addresses of servers whose process has exited."""
        return [p.address for p in self.processes if not p.alive()]


__all__ = ["LocalServers", "ServerStartError", "server_settings"]
