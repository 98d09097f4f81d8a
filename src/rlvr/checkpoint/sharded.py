"""A learner's training state as shards: every rank writes and reads its own part with
`torch.distributed.checkpoint` (DCP), so no rank ever holds the whole model or optimizer.

What it is: two functions over a policy, its optimizer and an optional frozen reference, plus
`extra`, small plain values (the LR scheduler's state, a step number) that rank 0 writes
once; everything is read back as data only (`rlvr.checkpoint.safe_load`: DCP's index, its
tensors and its plain values alike). What it is not: it knows no config, no trainer and no
file layout beyond its own directory; `rlvr.checkpoint.state` puts it inside a training state.

- Resharding: DCP records each tensor's global shape and which slice each rank wrote, and on
  load every rank reads the slices its own shards need. So a state saved by N FSDP2 ranks
  resumes on M ranks, or in one process on a plain module with no process group at all (DCP
  then runs with `no_dist`; likewise a plain module saves without one).
- Atomic: the ranks write into a temporary sibling of `directory`; only when all of them have
  finished (DCP's save is a collective that returns once every rank wrote) does rank 0 write
  `extra` and rename the whole directory into place (`rlvr.checkpoint.atomic`). A crash or an
  error on any rank mid-save leaves the previous `directory` as it was.
- The directory must be on a filesystem every rank can reach (NFS, Lustre, a shared disk of
  one node): rank 0 creates and renames it, each rank writes its own files into it, and on
  load every rank reads `extra` and the slices it needs.
- The process group is torch's default one, the group DCP and FSDP2 use; all ranks of it must
  call these functions together.

An optimizer that has not stepped stays fresh, as in `rlvr.learner.learner`'s
`optimizer_state_by_name`: DCP gives it one zero-learning-rate step so that it has state to
save or to load into, and that step count of 1 would change the bias correction of the first
real step. Both functions clear that state again, and the save records the optimizer as fresh
so the load clears it too (its param groups, such as a learning rate the schedule moved, are
still saved and restored).
"""

from __future__ import annotations

import io
import warnings
from pathlib import Path
from typing import Any, Callable

import torch
import torch.distributed as dist
import torch.distributed.checkpoint as dcp
from torch.distributed.checkpoint.api import CheckpointException
from torch.distributed.checkpoint.metadata import BytesStorageMetadata, Metadata
from torch.distributed.checkpoint.state_dict import (StateDictOptions, get_model_state_dict,
                                                     get_optimizer_state_dict,
                                                     set_model_state_dict,
                                                     set_optimizer_state_dict)

from rlvr.checkpoint.atomic import fresh_tmp_dir, publish_dir
from rlvr.checkpoint.safe_load import (DataLoadPlanner, SafeFileSystemReader,
                                       UnsafeStateFile, load_data, load_index)

EXTRA = "extra.pt"  # rank 0's small values, next to DCP's `.metadata` and `__<rank>_0.distcp`
METADATA = ".metadata"
# Each rank's own shards (DTensors stay DTensors); a plain module gives its plain tensors.
SHARDED = StateDictOptions(full_state_dict=False)


def save_sharded(directory: Path, policy: torch.nn.Module, optimizer: torch.optim.Optimizer,
                 reference: torch.nn.Module | None, extra: dict[str, Any]) -> Path:
    """Write the state of `policy`, `optimizer` and `reference` (each rank its shards) and
    `extra` (rank 0, picklable) to `directory`, replacing any earlier copy only once the new
    one is complete. A collective when a process group is initialised. Returns `directory`.

    It is built in `.tmp-<name>` beside `directory`; as `rlvr.checkpoint.atomic.fresh_tmp_dir`
    does, any `.tmp-*` a crashed save left in that folder is removed first."""
    directory = Path(directory)
    distributed = _distributed()
    tmp = directory.parent / f".tmp-{directory.name}"
    # Rank 0 makes the temporary directory before any rank writes into it.
    _on_rank_0(lambda: fresh_tmp_dir(directory), distributed)
    fresh = not optimizer.state
    state = _state_dicts(policy, optimizer, reference)
    try:
        _dcp(dcp.save, state, tmp, distributed)
    finally:
        if fresh:  # DCP stepped it at zero learning rate to have state to save
            optimizer.state.clear()
    meta = {"extra": extra, "optimizer_fresh": fresh, "has_reference": reference is not None}

    def write_extra_and_publish() -> None:
        with open(tmp / EXTRA, "wb") as f:
            torch.save(meta, f)
        publish_dir(tmp, directory)  # fsyncs `extra` (DCP fsyncs its own files)

    # Every rank's shards are written once the save above has returned on rank 0.
    _on_rank_0(write_extra_and_publish, distributed)
    return directory


def load_sharded(directory: Path, policy: torch.nn.Module, optimizer: torch.optim.Optimizer,
                 reference: torch.nn.Module | None) -> dict[str, Any]:
    """Restore what `save_sharded` wrote, on any number of ranks (or one process without a
    process group), and return its `extra`. The reference is restored when both the state and
    this call have one. A collective when a process group is initialised."""
    directory = Path(directory)
    meta = _read_record(directory)[0]
    with_reference = reference if meta["has_reference"] else None
    # Templates to load into: each rank's shards, laid out for THIS run's sharding; DCP fills
    # them from whichever saved slices overlap (getting the optimizer's gives it a zero step).
    state = _state_dicts(policy, optimizer, with_reference)
    # DCP's own reader unpickles its index file, and its planner the plain values with
    # weights_only=False; these read both as data (`safe_load`).
    _dcp(dcp.load, state, directory, _distributed(),
         storage_reader=SafeFileSystemReader(directory), planner=DataLoadPlanner())
    # The optimizer before the weights, in case setting it steps it (at zero learning rate).
    set_optimizer_state_dict(policy, optimizer, state["optimizer"], options=SHARDED)
    if meta["optimizer_fresh"]:
        optimizer.state.clear()
    set_model_state_dict(policy, state["policy"], options=SHARDED)
    if with_reference is not None:
        set_model_state_dict(with_reference, state["reference"], options=SHARDED)
    return meta["extra"]


def check_sharded(directory: Path) -> None:
    """Read what `load_sharded` would unpickle, as data and without a model: the index,
    `extra` and each plain value the shards hold (UnsafeStateFile, or ValueError, where one is
    not). So a crafted state is refused when a resume picks its state (`rlvr.checkpoint.state`),
    and the one before it is used, as for a crafted file of the full format."""
    directory = Path(directory)
    index = _read_record(directory)[1]
    entries = index.state_dict_metadata
    for key, where in index.storage_data.items():
        if type(entries.get(key.fqn)) is BytesStorageMetadata:
            with open(directory / where.relative_path, "rb") as f:
                f.seek(where.offset)
                data = f.read(where.length)
            load_data(io.BytesIO(data), f"the value of {key.fqn!r} in {directory}")


def _read_record(directory: Path) -> tuple[dict[str, Any], Metadata]:
    """`extra.pt`'s record and the index, both read as data; FileNotFoundError, UnsafeStateFile
    or ValueError where they are missing or not of a sharded learner state."""
    for name in (METADATA, EXTRA):
        if not (directory / name).is_file():
            raise FileNotFoundError(f"{directory} holds no sharded learner state ({name} is "
                                    "missing); is it on a filesystem this rank can read?")
    # Data only: tensors and plain values; the index DCP would unpickle is read as data first
    # (a clear error here, rather than one DCP wraps), and by DCP's reader in `load_sharded`.
    index = load_index(directory / METADATA)
    meta = load_data(directory / EXTRA)
    if not isinstance(meta, dict) or not {"extra", "optimizer_fresh", "has_reference"} <= set(meta):
        raise ValueError(f"{directory / EXTRA} is not the record of a sharded learner state")
    return meta, index


def _state_dicts(policy: torch.nn.Module, optimizer: torch.optim.Optimizer,
                 reference: torch.nn.Module | None) -> dict[str, Any]:
    """Keyed by parameter name (as the full format), so any sharding reads any other's."""
    state = {"policy": get_model_state_dict(policy, options=SHARDED),
             "optimizer": get_optimizer_state_dict(policy, optimizer, options=SHARDED)}
    if reference is not None:
        state["reference"] = get_model_state_dict(reference, options=SHARDED)
    return state


def _distributed() -> bool:
    return dist.is_available() and dist.is_initialized()


def _dcp(call: Callable[..., Any], state: dict[str, Any], directory: Path,
         distributed: bool, **kwargs: Any) -> None:
    """`dcp.save` / `dcp.load`. DCP's failures are `CheckpointException`s, which derive from
    BaseException (an `except Exception` would miss them): raised here as RuntimeError, on
    every rank alike (DCP gathers each rank's error)."""
    with warnings.catch_warnings():
        # One process without a process group is meant (a state resumed by one process).
        warnings.filterwarnings("ignore", message=".*assuming the intent is to .* single process")
        try:
            call(state, checkpoint_id=directory, no_dist=not distributed, **kwargs)
        except CheckpointException as e:
            for failure, _ in e.failures.values():  # a file that is not data says so itself
                if isinstance(failure, UnsafeStateFile):
                    raise failure from None
            raise RuntimeError(f"sharded checkpoint in {directory}: {e}") from e


def _on_rank_0(action: Callable[[], Any], distributed: bool) -> None:
    """Run `action` on rank 0; every rank returns once it has finished, or raises if it failed,
    so that no rank waits out a timeout on a peer that has already given up."""
    if not distributed:
        action()
        return
    error: Exception | None = None
    if dist.get_rank() == 0:
        try:
            action()
        except Exception as e:  # told to every rank first, then raised
            error = e
    box = [None if error is None else f"{type(error).__name__}: {error}"]
    dist.broadcast_object_list(box, src=0)
    if error is not None:
        raise error
    if box[0] is not None:
        raise RuntimeError(f"rank 0 failed while saving a sharded state: {box[0]}")
