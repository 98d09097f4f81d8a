"""Reading state files as data: nothing in a state directory is code.

A training state may come from someone else (a shared run directory, a download), and a pickle
runs whatever callable it names while it loads. So every pickled file of a state is read with
an allowlist of what it may construct:
- `load_data`: `torch.load(weights_only=True)`, torch's own restricted unpickler (tensors,
  containers, numbers, strings), widened only by numpy's uint32 arrays, which states written
  before rlvr stored its numpy RNG state as a list hold; anything else is refused with the
  globals it names. `trainer.pt`, a sharded state's `extra.pt`, and each plain value (a
  learning rate, Adam's betas) inside its `.distcp` files.
- `load_index`: DCP's `.metadata` index, which DCP itself reads with a plain `pickle.load`
  (torch 2.13), read by `rlvr.checkpoint.dcp_index` instead: exactly DCP's records, looked up
  as classes, never through a module attribute.
- `SafeFileSystemReader` and `DataLoadPlanner`: DCP's reader and planner with those two
  swapped in. DCP reads tensors with weights_only=True already, but the plain values of a
  state dict with `torch.load(weights_only=False)` (`DefaultLoadPlanner.load_bytes`).
What it is not: the SHA-256 manifest (`rlvr.checkpoint.state`), which finds damage; a checksum
written beside a crafted file matches it, so only loading as data keeps a crafted file inert.
"""

from __future__ import annotations

import io
import pickle
from pathlib import Path
from typing import IO, Any

import numpy as np
import torch
from torch.distributed.checkpoint import DefaultLoadPlanner, FileSystemReader
from torch.distributed.checkpoint._traverse import set_element
from torch.distributed.checkpoint.metadata import Metadata, StorageMeta
from torch.distributed.checkpoint.planner import ReadItem

from rlvr.checkpoint.dcp_index import NotAnIndex, read_index
from rlvr.device import HOST


class UnsafeStateFile(ValueError):
    """A state file holds something other than data (or cannot be read as data)."""


# Old states' numpy RNG state: a uint32 array (`np.random.get_state()`), rebuilt by these.
_NUMPY_ARRAY = [np._core.multiarray._reconstruct, np.ndarray, np.dtype,
                type(np.dtype(np.uint32))]


def load_data(path: Path | IO[bytes], name: str | None = None) -> Any:
    """The object pickled in `path` (a file, or bytes in a file object called `name`) by
    `torch.save`, if it is made of data only; else UnsafeStateFile naming the file and the
    globals it asks for."""
    name = name or Path(path).name
    try:
        with torch.serialization.safe_globals(_NUMPY_ARRAY):
            return torch.load(path, map_location=HOST, weights_only=True)
    except pickle.UnpicklingError as e:
        try:
            if hasattr(path, "seek"):
                path.seek(0)
            named = torch.serialization.get_unsafe_globals_in_checkpoint(path)
        except Exception:  # noqa: BLE001  an unreadable file: the load's own error says it
            named = []
        what = (f"it asks for {', '.join(named[:5])}" if named
                else str(e).strip().splitlines()[-1][:200])
        raise UnsafeStateFile(f"{name} is not plain data ({what}); a state file is "
                              "loaded as tensors and plain values only, never as code") from None
    except (RuntimeError, EOFError, OSError, ValueError) as e:
        raise UnsafeStateFile(f"{name} cannot be read ({str(e).splitlines()[0][:200]})"
                              ) from None


def load_index(path: Path) -> Metadata:
    """DCP's index file at `path` as data (`rlvr.checkpoint.dcp_index`); UnsafeStateFile
    naming the file and what it holds otherwise."""
    try:
        return read_index(Path(path).read_bytes())
    except NotAnIndex as e:
        raise UnsafeStateFile(f"{path} is not a plain checkpoint index ({e}); a state file is "
                              "loaded as DCP's records and plain values only, never as code"
                              ) from None


class SafeFileSystemReader(FileSystemReader):
    """DCP's file reader with its index read by `load_index`."""

    def read_metadata(self, *args: Any, **kwargs: Any) -> Metadata:
        metadata = load_index(Path(self._get_metadata_path(kwargs.get("rank"))))
        if metadata.storage_meta is None:
            metadata.storage_meta = StorageMeta()
        metadata.storage_meta.load_id = self.load_id
        return metadata


class DataLoadPlanner(DefaultLoadPlanner):
    """DCP's default planner, with the plain values of a state dict (a learning rate, Adam's
    betas) read by `load_data` rather than `torch.load(weights_only=False)`. As the default
    planner's `load_bytes`, but for that one call."""

    def load_bytes(self, read_item: ReadItem, value: io.BytesIO) -> None:
        fqn = read_item.dest_index.fqn
        loaded = load_data(value, f"the value of {fqn!r} in a sharded state")
        if self.flatten_state_dict:
            set_element(self.original_state_dict, self.mappings[fqn], loaded)
        else:
            self.state_dict[fqn] = loaded
