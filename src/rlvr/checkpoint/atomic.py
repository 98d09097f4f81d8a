"""Atomic writes shared by model checkpoints and training states: nothing half-written is ever
visible under its final name, and an earlier good copy is never damaged.

A file goes to a temporary sibling, fsynced, then renamed over its target; a directory is built
under a temporary name, its files fsynced, then renamed into place, and only the newest N of a
series are kept.
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path


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
        os.replace(tmp, target)
        shutil.rmtree(old, ignore_errors=True)
    else:
        os.replace(tmp, target)
    return target


def keep_last(series: list[Path], keep_last_n: int) -> None:
    """Remove all but the newest `keep_last_n` of `series` (oldest first); -1 keeps all."""
    if keep_last_n < 0:
        return
    for old in series[:max(len(series) - keep_last_n, 0)]:
        shutil.rmtree(old, ignore_errors=True)
