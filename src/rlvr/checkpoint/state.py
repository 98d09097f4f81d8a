"""Full training state for exact resume: weights, optimizer, schedule, RNGs, data position.

A state is written into a temporary directory and renamed into place (`checkpoint.atomic`),
with a manifest of SHA-256 checksums written before the rename: a crash mid-save leaves no half
state behind, and a state whose files do not match their manifest is skipped on resume (with a
warning) in favour of the one before. A save that fails to write (disk full) removes its
temporary directory and stops the run with `SaveFailed`, naming the state kept before it. The
run is reproducible step by step (sampling seeds derive from the step), so restoring these
objects continues the exact same run.

The learner's part comes in one of two formats (`checkpoint.state_format`). Full: gathered on
rank 0 and written here as `policy.safetensors`, `reference.safetensors` and inside
`trainer.pt`. Sharded: the learner's ranks write it themselves into the `learner/` subdirectory
of the state being built (`rlvr.checkpoint.sharded`), before the manifest and the rename, so a
state is complete or absent in either format; the state directory must then be on a
filesystem every learner rank reaches. A state is read back in the format it was written in.

A state is data, never code: its pickled files load through `rlvr.checkpoint.safe_load`
(tensors and plain values only; the sharded format's too, read when its state is picked, before
any learner rank loads it), and its RNG states are stored as plain numbers. What the manifest
proves is integrity, not authenticity (docs/security.md): whoever writes a state rewrites its
checksums. On resume, directories under the state folder that are not `step_<number>` are
skipped with a warning, as is a state that is damaged (manifest, checksums) or does not load;
`find_latest_state` reports each one, so a caller can refuse to start over when none is
usable.
"""

from __future__ import annotations

import hashlib
import json
import logging
import random
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

import numpy as np
import torch
from safetensors import SafetensorError
from safetensors.torch import load_file, save_file

from rlvr.checkpoint.atomic import keep_last, save_dir_atomic
from rlvr.checkpoint.safe_load import UnsafeStateFile, load_data
from rlvr.checkpoint.sharded import check_sharded

log = logging.getLogger(__name__)
MANIFEST = "manifest.json"
LEARNER_DIR = "learner"  # the sharded format's learner state


@dataclass
class TrainingState:
    """What a resumed run needs besides its config."""

    step: int
    episode: int
    mixer: dict[str, Any]
    policy: dict[str, torch.Tensor]
    reference: dict[str, torch.Tensor] | None
    optimizer: dict[str, Any]
    scheduler: dict[str, Any]
    rng: dict[str, Any]
    # Weight updates applied so far: the version the engines hold. States written before this
    # field existed read it as their step (every step updated then, as far as they knew).
    policy_version: int = 0
    # The sharded format: policy, reference, optimizer and scheduler above are empty, and the
    # learner's ranks write them. On save, `write_learner(directory)` writes them into the
    # state being built; a loaded state names where they are in `learner_dir`.
    write_learner: Callable[[Path], None] | None = None
    learner_dir: Path | None = None
    # An asynchronous run's batches made ahead of the trainer, as JSON text written and read by
    # `rlvr.producer.ahead_state` (stored as ahead.json); "" when there are none.
    ahead: str = ""


def capture_rng() -> dict[str, Any]:
    """The process's RNG states as tensors and plain values (numpy's key array as a list)."""
    kind, keys, pos, has_gauss, gauss = np.random.get_state()
    return {"python": random.getstate(),
            "numpy": (kind, [int(k) for k in keys], int(pos), int(has_gauss), float(gauss)),
            "torch": torch.get_rng_state()}


def restore_rng(rng: dict[str, Any]) -> None:
    version, internal, gauss = rng["python"]
    random.setstate((version, tuple(internal), gauss))
    kind, keys, pos, has_gauss, cached = rng["numpy"]  # older states hold the key array itself
    np.random.set_state((kind, np.asarray(keys, dtype=np.uint32), pos, has_gauss, cached))
    torch.set_rng_state(rng["torch"])


def _sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def _contiguous(tensors: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    # safetensors refuses shared storage (tied embeddings): store independent copies.
    return {k: v.detach().clone().contiguous() for k, v in tensors.items()}


def save_state(state: TrainingState, state_dir: Path, keep_last_n: int = 2) -> Path:
    target = Path(state_dir) / f"step_{state.step:06d}"
    before = [p for p in list_states(state_dir) if p != target]
    kept = (f"the last training state before it is kept: {before[-1]}" if before else
            f"no earlier training state is in {state_dir}")
    save_dir_atomic(target, lambda tmp: _write_state(state, tmp), "the training state",
                    f"{kept}: free space and rerun the same command to resume")
    keep_last(list_states(state_dir), keep_last_n)
    return target


def _write_state(state: TrainingState, tmp: Path) -> None:
    if state.write_learner is not None:
        state.write_learner(tmp / LEARNER_DIR)
    else:
        save_file(_contiguous(state.policy), tmp / "policy.safetensors")
    if state.reference is not None:
        save_file(_contiguous(state.reference), tmp / "reference.safetensors")
    # Through a file object: a failed write then raises torch's error chained to the OSError
    # (ENOSPC) that says what failed; given a path, torch reports only "unexpected pos".
    with open(tmp / "trainer.pt", "wb") as f:
        torch.save({"optimizer": state.optimizer, "scheduler": state.scheduler, "rng": state.rng,
                    "mixer": state.mixer}, f)
    (tmp / "progress.json").write_text(json.dumps({"step": state.step, "episode": state.episode,
                                                   "policy_version": state.policy_version}))
    if state.ahead:
        (tmp / "ahead.json").write_text(state.ahead)
    # Relative paths: the sharded format's learner files sit in a subdirectory.
    files = sorted(p.relative_to(tmp).as_posix() for p in tmp.rglob("*") if p.is_file())
    manifest = {name: _sha256(tmp / name) for name in files}
    (tmp / MANIFEST).write_text(json.dumps(manifest, indent=1))


_STATE_NAME = re.compile(r"step_(\d+)")


def list_states(state_dir: Path, warn: bool = False) -> list[Path]:
    """The `step_<number>` directories of `state_dir`, oldest first. Anything else named
    `step_*` (a copy such as step_000003.bak, a file) is no state: left alone, and with `warn`
    logged."""
    states = []
    for path in Path(state_dir).glob("step_*"):
        if _STATE_NAME.fullmatch(path.name) and path.is_dir():
            states.append(path)
        elif warn:
            log.warning("%s is not a training state (not a step_<number> directory); skipped",
                        path)
    return sorted(states, key=lambda p: int(p.name.split("_")[1]))


def verify_state(path: Path) -> str | None:
    """None if every file matches the manifest, else what is wrong."""
    manifest_path = path / MANIFEST
    if not manifest_path.exists():
        return "no manifest"
    try:
        manifest = json.loads(manifest_path.read_text())
    except (json.JSONDecodeError, UnicodeDecodeError, RecursionError):  # nested past Python's stack
        return "unreadable manifest"
    if not isinstance(manifest, dict) or not all(isinstance(k, str) and isinstance(v, str)
                                                 for k, v in manifest.items()):
        return "the manifest is not a mapping of file names to checksums"
    for name, digest in manifest.items():
        if Path(name).is_absolute() or ".." in Path(name).parts:
            return f"the manifest names {name!r}, outside the state"
        if not (path / name).is_file():
            return f"{name} is missing"
        if _sha256(path / name) != digest:
            return f"{name} does not match its checksum"
    return None


def load_latest_state(state_dir: Path) -> TrainingState | None:
    """The newest state that verifies and loads; others are skipped with a warning."""
    return find_latest_state(state_dir)[0]


def find_latest_state(state_dir: Path) -> tuple[TrainingState | None, list[tuple[Path, str]]]:
    """The newest state of `state_dir` that verifies and loads (None if none does), and each
    newer state that did not with what is wrong with it, each skipped with a warning."""
    rejected: list[tuple[Path, str]] = []
    for path in reversed(list_states(state_dir, warn=True)):
        problem = verify_state(path)
        if problem is None:
            try:
                return _load_state(path), rejected
            except UnsafeStateFile as e:
                problem = str(e)
            except (KeyError, TypeError, ValueError, OSError, SafetensorError,
                    RecursionError) as e:
                # verified, yet not of this layout (or a crafted file with a matching checksum)
                problem = f"not a training state of this rlvr ({type(e).__name__}: {e})"
        log.warning("training state %s cannot be used (%s); falling back to the one before",
                    path, problem)
        rejected.append((path, problem))
    return None, rejected


def _load_state(path: Path) -> TrainingState:
    trainer = load_data(path / "trainer.pt")
    progress = json.loads((path / "progress.json").read_text())
    reference = path / "reference.safetensors"
    sharded = (path / LEARNER_DIR).is_dir()
    if sharded:  # what the learner's ranks will unpickle, read as data before any rank does
        check_sharded(path / LEARNER_DIR)
    return TrainingState(
        step=int(progress["step"]), episode=int(progress["episode"]), mixer=trainer["mixer"],
        policy={} if sharded else load_file(path / "policy.safetensors"),
        reference=load_file(reference) if reference.exists() else None,
        optimizer=trainer["optimizer"], scheduler=trainer["scheduler"], rng=trainer["rng"],
        policy_version=int(progress.get("policy_version", progress["step"])),
        learner_dir=path / LEARNER_DIR if sharded else None,
        ahead=_ahead_text(path / "ahead.json"))


def _ahead_text(path: Path) -> str:
    """The batches made ahead as JSON text ("" for none), checked to parse here, where a
    state that does not is skipped, rather than when the producer starts."""
    if not path.is_file():
        return ""
    text = path.read_text()
    json.loads(text)  # ValueError, or RecursionError when nested past Python's stack
    return text
