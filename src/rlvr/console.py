"""What a person reads on the console: timestamped log lines, announced start-up phases, and no
third-party noise.

What it is: `configure_logging()` (the CLI calls it; from Python, call it once, as
docs/getting-started.md says), `quiet_third_party()` (the libraries rlvr drives print warnings,
banners and loading bars meant for their own users: silenced unless `RLVR_DEBUG=1`), and
`phase(...)`, which announces a start-up phase and says how long it took.
What it is not: the per-step line (`rlvr.metrics.console`) or the metrics (`rlvr.metrics`).

Quieting is idempotent and cheap, so library entry points (`build_run`, `rlvr eval`) call it
too: a user who trains from Python gets the same console as the CLI's.
"""

from __future__ import annotations

import logging
import os
import sys
import time
import warnings
from contextlib import contextmanager
from typing import Iterator

log = logging.getLogger("rlvr")

DEBUG_ENV = "RLVR_DEBUG"  # 1: every third-party line, and rlvr's own at DEBUG
LEVEL_ENV = "RLVR_LOG_LEVEL"  # debug | info | warning | error
TIME_FORMAT = "%H:%M:%S"
LINE_FORMAT = "%(asctime)s %(levelname)s %(name)s: %(message)s"

# Loggers of libraries rlvr drives, and the level below which their lines are noise here: an
# engine's start-up banner and Triton notes, torch's "Triton not available", Ray's and httpx's
# per-call lines. Their warnings about what rlvr asked them are kept where they can matter. An
# engine's own library is added by its subpackage (`quiet_library`).
THIRD_PARTY_LEVELS = {"torch": logging.ERROR,
                      "transformers": logging.ERROR, "datasets": logging.WARNING,
                      "ray": logging.WARNING, "httpx": logging.WARNING,
                      "urllib3": logging.WARNING, "filelock": logging.WARNING,
                      "numexpr": logging.WARNING, "accelerate": logging.WARNING,
                      "peft": logging.WARNING, "huggingface_hub": logging.WARNING}
# Deprecation notices raised inside these packages are for their authors, not rlvr's users.
THIRD_PARTY_PACKAGES = {"torch", "transformers", "ray", "datasets", "peft", "triton"}
# Whether this process quietened the libraries (`quiet_third_party` ran): a library added later
# (`quiet_library`) is quietened at once.
_quieted = False
# Read by the libraries at import (torch's C++ side logs before Python can filter). An engine
# sets its own library's variables where it starts it, in its subpackage.
QUIET_ENV = {"TORCH_CPP_LOG_LEVEL": "ERROR", "TOKENIZERS_PARALLELISM": "false", "TRANSFORMERS_VERBOSITY": "error",
             "HF_HUB_DISABLE_PROGRESS_BARS": "1", "RAY_DEDUP_LOGS": "1",
             # tqdm reads it at import: transformers' GGUF conversion bar (rlvr prepare) and
             # any other library's bars; rlvr announces those phases itself.
             "TQDM_DISABLE": "1"}


def debug_requested() -> bool:
    return os.environ.get(DEBUG_ENV, "").strip() not in ("", "0", "false", "no")


def requested_level(default: str = "info") -> int:
    """`RLVR_DEBUG=1` wins; else `RLVR_LOG_LEVEL`; else `default`."""
    if debug_requested():
        return logging.DEBUG
    return level_named(os.environ.get(LEVEL_ENV, default), LEVEL_ENV)


def level_named(name: str, where: str) -> int:
    """The logging level `name` (debug, info, warning, error; any case) names; ValueError
    naming `where` it came from otherwise."""
    level = logging.getLevelName(name.strip().upper())
    if not isinstance(level, int):
        raise ValueError(f"{where}={name.strip().lower()!r}: expected debug, info, warning or "
                         "error")
    return level


def configure_logging(level: int | str | None = None, stream=None) -> None:
    """rlvr's lines at `level` (default: `requested_level()`), timestamped, on `stream` (stderr),
    and the libraries quietened (`quiet_third_party`). Replaces the handler it installed before,
    so calling it twice does not print lines twice."""
    if isinstance(level, str):
        level = level_named(level, "--log-level")
    level = requested_level() if level is None else level
    root = logging.getLogger()
    for handler in list(root.handlers):
        if getattr(handler, "_rlvr", False):
            root.removeHandler(handler)
    handler = logging.StreamHandler(stream) if stream is not None else _StderrHandler()
    handler.setFormatter(logging.Formatter(LINE_FORMAT, TIME_FORMAT))
    handler._rlvr = True  # type: ignore[attr-defined]
    root.addHandler(handler)
    root.setLevel(level)
    quiet_third_party()


class _StderrHandler(logging.StreamHandler):
    """Writes to whatever `sys.stderr` is when a line is emitted, not the object it was when
    logging was configured: a caller that swaps stderr (a test capturing it, a notebook)
    would otherwise leave the handler writing to a closed stream."""

    @property
    def stream(self):  # type: ignore[override]
        return sys.stderr

    @stream.setter
    def stream(self, value) -> None:  # StreamHandler.__init__ assigns it
        pass


def quiet_third_party() -> None:
    """Silence the libraries' own chatter (see THIRD_PARTY_LEVELS and QUIET_ENV); a no-op under
    `RLVR_DEBUG=1`. Environment defaults only reach libraries not yet imported, so the CLI calls
    this before importing any of them."""
    if debug_requested():
        return
    for key, value in QUIET_ENV.items():
        os.environ.setdefault(key, value)
    global _quieted
    _quieted = True
    for name, level in THIRD_PARTY_LEVELS.items():
        _raise_level(name, level)
    _ignore_warnings_from(THIRD_PARTY_PACKAGES)
    if "transformers" in sys.modules:  # its verbosity and bars live in its own module state
        from transformers.utils import logging as hf_logging

        hf_logging.set_verbosity_error()
        hf_logging.disable_progress_bar()


def quiet_library(package: str, level: int = logging.WARNING) -> None:
    """Quieten one more library as the built-in ones are (its lines below `level`, its
    deprecation notices), now and at every later `quiet_third_party`: how an engine's
    subpackage adds the library it drives, before that library is imported."""
    THIRD_PARTY_LEVELS[package] = level
    THIRD_PARTY_PACKAGES.add(package)
    if _quieted and not debug_requested():  # only where rlvr runs the console, not as a library
        _raise_level(package, level)
        _ignore_warnings_from({package})


def _raise_level(name: str, level: int) -> None:
    logger = logging.getLogger(name)
    if logger.level == logging.NOTSET or logger.level < level:
        logger.setLevel(level)


def _ignore_warnings_from(packages: set[str]) -> None:
    pattern = rf"({'|'.join(sorted(packages))})(\.|$)"
    for category in (FutureWarning, DeprecationWarning, UserWarning):
        warnings.filterwarnings("ignore", category=category, module=pattern)


def quiet_imported_torch() -> None:
    """torch resets its loggers' levels when it is imported (torch._logging): call this after
    importing torch for THIRD_PARTY_LEVELS to hold."""
    if debug_requested():
        return
    for name in ("torch", "torch._library", "torch.distributed", "torch._dynamo",
                 "torch._inductor"):
        logging.getLogger(name).setLevel(logging.ERROR)


@contextmanager
def phase(what: str, logger: logging.Logger = log) -> Iterator[dict]:
    """Announce a start-up phase, then say it is done and how long it took:
    `with phase("model") as done: ...; done["detail"] = "135M parameters"` logs `model ...`,
    then `model: 135M parameters (0.4 s)`."""
    logger.info("%s ...", what)
    start = time.perf_counter()
    done: dict = {}
    yield done
    seconds = time.perf_counter() - start
    logger.info("%s: %s (%.1f s)", what, done.get("detail") or "done", seconds)
