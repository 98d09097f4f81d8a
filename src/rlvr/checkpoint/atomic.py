"""Atomic writes shared by model checkpoints and training states: nothing half-written is ever
visible under its final name, and an earlier good copy is never damaged.

A file goes to a temporary sibling, fsynced, then renamed over its target; a directory is built
under a temporary name, its files fsynced, then renamed into place, and only the newest N of a
series are kept. A directory whose write fails is removed, never left half-written, and a failed
write (disk full, a quota, an I/O error) is told from a bug and stops the run with `SaveFailed`.
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path
from typing import Callable

from safetensors import SafetensorError

from rlvr.run.errors import SaveFailed


def write_text_atomic(path: Path, text: str) -> None:
    """Write to a temporary sibling, fsync, then rename over the target."""
    path = Path(path)
    tmp = path.with_name(f".{path.name}.tmp")
    with open(tmp, "w", encoding="utf-8") as f:
        f.write(text)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)


def write_bytes_atomic(path: Path, data: bytes) -> None:
    """`write_text_atomic` for bytes (a Parquet file built in memory). The temporary sibling's
    name starts with a dot, which directory readers (pyarrow datasets, globs) skip."""
    path = Path(path)
    tmp = path.with_name(f".{path.name}.tmp")
    with open(tmp, "wb") as f:
        f.write(data)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)


def fresh_tmp_dir(target: Path) -> Path:
    """An empty `.tmp-<name>` sibling of `target` to build it in; temporaries a crash left
    behind in the same folder are removed first."""
    target.parent.mkdir(parents=True, exist_ok=True)
    for stale in target.parent.glob(".tmp-*"):
        shutil.rmtree(stale, ignore_errors=True)
    tmp = target.parent / f".tmp-{target.name}"
    tmp.mkdir()
    return tmp


def publish_dir(tmp: Path, target: Path) -> Path:
    """Make the directory built in `tmp` visible as `target`: its files reach the disk first,
    then one rename replaces any earlier `target`."""
    for p in tmp.iterdir():
        if p.is_file():
            with open(p, "rb") as f:
                os.fsync(f.fileno())
    if target.exists():
        # Move the old copy aside first: at every instant one complete copy exists.
        old = target.parent / f".tmp-old-{target.name}"
        os.replace(target, old)
        try:
            os.replace(tmp, target)
        except OSError:
            os.replace(old, target)  # the old copy back under its name, not left as a temporary
            raise
        shutil.rmtree(old, ignore_errors=True)
    else:
        os.replace(tmp, target)
    return target


def save_dir_atomic(target: Path, fill: Callable[[Path], None], what: str, kept: str) -> Path:
    """Build `target` by `fill(tmp)` in a fresh temporary sibling and publish it. If anything
    fails, the temporary is removed: a full disk must not keep the space of a half-written copy.
    A failed write becomes `SaveFailed`, naming `what` and `target`, the error, and `kept` (the
    saves left to resume from); any other error (a bug) propagates as it was."""
    tmp = None
    try:
        tmp = fresh_tmp_dir(target)
        fill(tmp)
        return publish_dir(tmp, target)
    except BaseException as e:
        if tmp is not None:
            shutil.rmtree(tmp, ignore_errors=True)
        cause = write_failure(e)
        if cause is None:
            raise
        raise SaveFailed(f"writing {what} {target} failed ({cause}); nothing half-written is "
                         f"left, and {kept}") from e


def write_failure(error: BaseException) -> str | None:
    """What went wrong if `error` is a failed write, in one line; None if it is anything else
    (a bug, which must keep its traceback). Writers report a failed write in three ways: Python's
    file calls raise OSError (ENOSPC, EDQUOT, EIO); torch.save raises RuntimeError ("unexpected
    pos"), chained to the OSError of the file object it was writing; safetensors raises
    SafetensorError ("I/O error", chained to nothing)."""
    if isinstance(error, SafetensorError):
        return _one_line(error) if any(s in str(error) for s in ("I/O error", "IoError")) else None
    if isinstance(error, RuntimeError):  # torch's writer, failing while its file's OSError flew
        error = error.__cause__ or error.__context__
    return _one_line(error) if isinstance(error, OSError) else None


def _one_line(error: BaseException) -> str:
    return " ".join(f"{type(error).__name__}: {error}".split())


def keep_last(series: list[Path], keep_last_n: int) -> None:
    """Remove all but the newest `keep_last_n` of `series` (oldest first); -1 keeps all."""
    if keep_last_n < 0:
        return
    for old in series[:max(len(series) - keep_last_n, 0)]:
        shutil.rmtree(old, ignore_errors=True)
