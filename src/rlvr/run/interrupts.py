"""Stopping a run cleanly: SIGINT/SIGTERM finish the current step, the trainer saves the state
and exits non-zero saying how to resume; a second signal stops at once. The errors that end a
run are in `rlvr.run.errors`.
"""

from __future__ import annotations

import signal
from types import FrameType


class StopOnSignal:
    """Context manager: the first SIGINT/SIGTERM sets `signum`; handlers restored on exit."""

    SIGNALS = (signal.SIGINT, signal.SIGTERM)

    def __init__(self) -> None:
        self.signum: int | None = None
        self._previous: dict[int, object] = {}

    def _handle(self, signum: int, frame: FrameType | None) -> None:
        if self.signum is not None:  # asked twice: stop now
            signal.signal(signum, signal.SIG_DFL)
            signal.raise_signal(signum)
        self.signum = signum

    def __enter__(self) -> "StopOnSignal":
        for sig in self.SIGNALS:
            self._previous[sig] = signal.signal(sig, self._handle)
        return self

    def __exit__(self, *exc) -> None:
        for sig, handler in self._previous.items():
            signal.signal(sig, handler)
